//! `random`: a fresh uniformly random order for every request (Fisher–Yates over the
//! request's draw). Reads the draw.

use super::draw::Rng;
use super::{Needs, RoutingCtx, Strategy};

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Random;

impl Strategy for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn needs(&self) -> Needs {
        Needs {
            draw: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        let mut out: Vec<usize> = (0..ctx.views.len()).collect();
        Rng::new(ctx.draw).shuffle(&mut out);
        out
    }
}
