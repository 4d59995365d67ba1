//! `pipeline`: a dispatch shape, not an ordering ([`crate::routing::shape`]): the
//! combo's targets answer in turn, each one's answer the next one's input, and the
//! last one answers the client. The candidates stay in plan order: each step tries its
//! target's connections as planned. Reads nothing.

use super::{Needs, RoutingCtx, Strategy};
use crate::routing::shape::Shape;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pipeline;

impl Strategy for Pipeline {
    fn name(&self) -> &'static str {
        "pipeline"
    }

    fn needs(&self) -> Needs {
        Needs::NONE
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        (0..ctx.views.len()).collect()
    }

    fn shape(&self) -> Shape {
        Shape::Pipeline
    }
}
