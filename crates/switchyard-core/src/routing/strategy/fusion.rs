//! `fusion`: a dispatch shape, not an ordering ([`crate::routing::shape`]): every combo
//! target answers in parallel and the first target judges their answers into the one
//! the client gets. The candidates stay in plan order: each panel member tries its
//! target's connections as planned, and the judge's fallbacks are the other targets in
//! their order. Reads nothing.

use super::{Needs, RoutingCtx, Strategy};
use crate::routing::shape::Shape;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fusion;

impl Strategy for Fusion {
    fn name(&self) -> &'static str {
        "fusion"
    }

    fn needs(&self) -> Needs {
        Needs::NONE
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        (0..ctx.views.len()).collect()
    }

    fn shape(&self) -> Shape {
        Shape::Fusion
    }
}
