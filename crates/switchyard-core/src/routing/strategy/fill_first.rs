//! `fill-first`: the plan's order and nothing else — the first target takes every
//! request until it is excluded (cooling, locked, out of quota), then the next. Unlike
//! `priority` it does not let the soft quota penalty move a target back: the operator's
//! order is absolute. Reads nothing.

use super::{Needs, RoutingCtx, Strategy};

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct FillFirst;

impl Strategy for FillFirst {
    fn name(&self) -> &'static str {
        "fill-first"
    }

    fn needs(&self) -> Needs {
        Needs::NONE
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        (0..ctx.views.len()).collect()
    }
}
