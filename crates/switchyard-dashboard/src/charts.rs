//! Charts drawn as inline SVG on the server: a stacked bar (each key's use of a
//! dimension, with marks such as the fair share and the saturation threshold) and a
//! line chart (a series per key or per provider over time). Colours come from the
//! stylesheet's classes; lines also differ by dash pattern, and every chart carries a
//! text title and description, so nothing is told by colour alone. Presentation is in
//! attributes, not `style`, so the page's `default-src 'self'` policy holds.

use maud::{html, Markup};
use std::fmt::Write;

/// Distinct colour classes (`s0`…`s7` for bars, `l0`…`l7` for lines).
const PALETTE: usize = 8;

/// Dash patterns for lines, by series index.
const DASHES: [&str; 6] = ["", "6 3", "2 3", "10 3 2 3", "1 6", "14 4"];

/// `value` for people: whole numbers as such, others with up to two decimals.
pub fn number(value: f64) -> String {
    if !value.is_finite() {
        return "—".to_owned();
    }
    if (value - value.round()).abs() < 0.005 {
        format!("{:.0}", value.round())
    } else {
        let s = format!("{value:.2}");
        s.trim_end_matches('0').to_owned()
    }
}

/// One part of a stacked bar.
#[derive(Debug)]
pub struct Segment<'a> {
    pub label: &'a str,
    pub value: f64,
}

/// A labelled vertical mark on a bar, at `value`.
#[derive(Debug)]
pub struct Mark<'a> {
    pub label: &'a str,
    pub value: f64,
}

const BAR_WIDTH: f64 = 600.0;

/// `value` on a bar scaled to `max`, clamped to the bar.
fn x_of(value: f64, max: f64) -> f64 {
    if max <= 0.0 || !value.is_finite() {
        return 0.0;
    }
    (value / max).clamp(0.0, 1.0) * BAR_WIDTH
}

/// The `stroke-dasharray` of series or mark `i` (none for the first).
fn dash(i: usize) -> Option<&'static str> {
    Some(DASHES[i % DASHES.len()]).filter(|d| !d.is_empty())
}

/// A coordinate with one decimal, as the charts write them.
fn at(v: f64) -> String {
    format!("{v:.1}")
}

/// A horizontal bar scaled to `max` with `segments` stacked left to right and `marks`
/// drawn across it, each mark with its own dash pattern. The legend under the bar names
/// every segment and mark with its value in text, so nothing depends on colour or on
/// hovering. Use beyond `max` is drawn to the end of the bar; the description and the
/// legend say the real values.
pub fn stacked_bar(title: &str, max: f64, segments: &[Segment<'_>], marks: &[Mark<'_>]) -> Markup {
    let total: f64 = segments.iter().map(|s| s.value.max(0.0)).sum();
    let mut desc = format!("Total {} of {}.", number(total), number(max));
    for s in segments {
        let _ = write!(desc, " {}: {}.", s.label, number(s.value));
    }
    for m in marks {
        let _ = write!(desc, " {} at {}.", m.label, number(m.value));
    }
    // Each segment's start and width on the bar.
    let mut end = 0.0_f64;
    let placed: Vec<(f64, f64)> = segments
        .iter()
        .map(|s| {
            let start = x_of(end, max);
            end += s.value.max(0.0);
            (start, x_of(end, max) - start)
        })
        .collect();
    html! {
        figure.bar-chart {
            svg.chart.bar viewBox={ "0 0 " (BAR_WIDTH) " 32" } width="100%" role="img" preserveAspectRatio="none" {
                title { (title) }
                desc { (desc) }
                rect.track x="0" y="4" width=(BAR_WIDTH) height="24" {}
                @for (i, (s, (start, width))) in segments.iter().zip(&placed).enumerate() {
                    @if *width > 0.0 {
                        rect class={ "s" (i % PALETTE) } x=(at(*start)) y="4" width=(at(*width)) height="24" {
                            title { (s.label) ": " (number(s.value)) }
                        }
                    }
                }
                @for (i, m) in marks.iter().enumerate() {
                    line.mark x1=(at(x_of(m.value, max))) x2=(at(x_of(m.value, max))) y1="0" y2="32" stroke-dasharray=[dash(i)] {}
                }
            }
            figcaption {
                ul.legend {
                    @for (i, s) in segments.iter().enumerate() {
                        li {
                            svg.swatch viewBox="0 0 12 12" width="12" height="12" aria-hidden="true" {
                                rect class={ "s" (i % PALETTE) } x="0" y="0" width="12" height="12" {}
                            }
                            (s.label) ": " (number(s.value))
                        }
                    }
                    @for (i, m) in marks.iter().enumerate() {
                        li {
                            svg.swatch viewBox="0 0 24 8" width="24" height="8" aria-hidden="true" {
                                line.mark x1="0" x2="24" y1="4" y2="4" stroke-dasharray=[dash(i)] {}
                            }
                            (m.label) ": " (number(m.value))
                        }
                    }
                }
            }
        }
    }
}

/// One line of a line chart: its label and its points, evenly spaced left to right.
#[derive(Debug)]
pub struct Series<'a> {
    pub label: &'a str,
    pub points: &'a [f64],
}

/// A round axis maximum at or above `top` (1, 2 or 5 times a power of ten).
pub fn axis_max(top: f64) -> f64 {
    if !top.is_finite() || top <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(top.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|f| f * magnitude)
        .find(|m| *m >= top)
        .unwrap_or(10.0 * magnitude)
}

/// A line chart titled `title`, with `series` over a time axis labelled `from` at the
/// left and `to` at the right, values in `unit`, and a legend naming every line.
pub fn line_chart(title: &str, unit: &str, from: &str, to: &str, series: &[Series<'_>]) -> Markup {
    const W: f64 = 600.0;
    const H: f64 = 160.0;
    const LEFT: f64 = 48.0;
    const TOP: f64 = 8.0;
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max);
    let max = axis_max(top);
    let plot_w = W - LEFT - 8.0;
    let mut desc = format!("{unit}, from {from} to {to}.");
    for s in series {
        let total: f64 = s.points.iter().copied().filter(|v| v.is_finite()).sum();
        let last = s.points.last().copied().unwrap_or(0.0);
        let peak = s.points.iter().copied().fold(0.0_f64, f64::max);
        let _ = write!(
            desc,
            " {}: total {}, last {}, peak {}.",
            s.label,
            number(total),
            number(last),
            number(peak)
        );
    }
    let grid = [
        (0.0, "0".to_owned()),
        (0.5, number(max / 2.0)),
        (1.0, number(max)),
    ]
    .map(|(frac, label)| (TOP + H * (1.0 - frac), label));
    let points = |s: &Series<'_>| {
        let n = s.points.len();
        let step = if n > 1 { plot_w / (n - 1) as f64 } else { 0.0 };
        s.points
            .iter()
            .enumerate()
            .map(|(j, v)| {
                let v = if v.is_finite() {
                    v.clamp(0.0, max)
                } else {
                    0.0
                };
                format!(
                    "{:.1},{:.1}",
                    LEFT + step * j as f64,
                    TOP + H * (1.0 - v / max)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    html! {
        figure.line-chart {
            p.chart-title aria-hidden="true" { (title) }
            svg.chart.line viewBox={ "0 0 " (W) " " (H + 24.0) } width="100%" role="img" {
                title { (title) }
                desc { (desc) }
                @for (y, label) in &grid {
                    line.grid x1=(LEFT) x2=(W - 8.0) y1=(at(*y)) y2=(at(*y)) {}
                    text.axis x=(LEFT - 4.0) y=(at(y + 4.0)) text-anchor="end" { (label) }
                }
                text.axis x=(LEFT) y=(TOP + H + 16.0) { (from) }
                text.axis x=(W - 8.0) y=(TOP + H + 16.0) text-anchor="end" { (to) }
                @for (i, s) in series.iter().enumerate() {
                    polyline class={ "l" (i % PALETTE) } fill="none" stroke-dasharray=[dash(i)] points=(points(s)) {
                        title { (s.label) }
                    }
                }
            }
            figcaption {
                ul.legend {
                    @for (i, s) in series.iter().enumerate() {
                        li {
                            svg.swatch viewBox="0 0 24 8" width="24" height="8" aria-hidden="true" {
                                line class={ "l" (i % PALETTE) } x1="0" x2="24" y1="4" y2="4" stroke-dasharray=[dash(i)] {}
                            }
                            (s.label)
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(number(0.0), "0");
        assert_eq!(number(1200.0), "1200");
        assert_eq!(number(2.5), "2.5");
        assert_eq!(number(0.126), "0.13");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(-3.0), "-3");
        assert_eq!(number(f64::NAN), "—");
    }

    #[test]
    fn axis_maxima_are_round() {
        assert_eq!(axis_max(0.0), 1.0);
        assert_eq!(axis_max(0.3), 0.5);
        assert_eq!(axis_max(1.0), 1.0);
        assert_eq!(axis_max(7.0), 10.0);
        assert_eq!(axis_max(120.0), 200.0);
        assert_eq!(axis_max(f64::INFINITY), 1.0);
    }

    #[test]
    fn a_stacked_bar_places_segments_and_marks_on_the_scale() {
        let svg = stacked_bar(
            "requests:1m",
            100.0,
            &[
                Segment {
                    label: "k1",
                    value: 25.0,
                },
                Segment {
                    label: "k<2>",
                    value: 50.0,
                },
                Segment {
                    label: "empty",
                    value: 0.0,
                },
            ],
            &[
                Mark {
                    label: "fair share",
                    value: 50.0,
                },
                Mark {
                    label: "threshold",
                    value: 80.0,
                },
            ],
        )
        .into_string();
        assert!(svg.contains("<title>requests:1m</title>"));
        assert!(svg.contains(
            "<desc>Total 75 of 100. k1: 25. k&lt;2&gt;: 50. empty: 0. fair share at 50. threshold at 80.</desc>"
        ));
        assert!(svg.contains(r#"<rect class="s0" x="0.0" y="4" width="150.0" height="24"><title>k1: 25</title></rect>"#));
        assert!(svg.contains(r#"<rect class="s1" x="150.0" y="4" width="300.0" height="24"><title>k&lt;2&gt;: 50</title></rect>"#));
        assert!(!svg.contains("empty: 0</title>"));
        assert!(svg.contains(r#"<line class="mark" x1="300.0" x2="300.0" y1="0" y2="32"></line><line class="mark" x1="480.0" x2="480.0" y1="0" y2="32" stroke-dasharray="6 3"></line></svg>"#));
        assert!(svg.contains(r#"<ul class="legend"><li><svg class="swatch" viewBox="0 0 12 12" width="12" height="12" aria-hidden="true"><rect class="s0" x="0" y="0" width="12" height="12"></rect></svg>k1: 25</li>"#));
        assert!(svg.contains(
            r#"<rect class="s2" x="0" y="0" width="12" height="12"></rect></svg>empty: 0</li>"#
        ));
        assert!(svg.contains(r#"<li><svg class="swatch" viewBox="0 0 24 8" width="24" height="8" aria-hidden="true"><line class="mark" x1="0" x2="24" y1="4" y2="4"></line></svg>fair share: 50</li>"#));
        assert!(svg.contains(
            r#"y2="4" stroke-dasharray="6 3"></line></svg>threshold: 80</li></ul></figcaption></figure>"#
        ));
        assert!(!svg.contains("style="));
    }

    #[test]
    fn use_beyond_the_limit_is_clamped_to_the_bar() {
        let svg = stacked_bar(
            "x",
            10.0,
            &[Segment {
                label: "a",
                value: 30.0,
            }],
            &[],
        )
        .into_string();
        assert!(svg.contains(r#"width="600.0" height="24"><title>a: 30</title>"#));
        assert!(svg.contains("<desc>Total 30 of 10. a: 30.</desc>"));
        let zero = stacked_bar(
            "x",
            0.0,
            &[Segment {
                label: "a",
                value: 3.0,
            }],
            &[],
        )
        .into_string();
        assert!(!zero.contains("<title>a: 3</title>"));
    }

    #[test]
    fn a_line_chart_scales_points_and_names_every_line() {
        let svg = line_chart(
            "Burn rate",
            "tokens per minute",
            "60 min ago",
            "now",
            &[
                Series {
                    label: "k1",
                    points: &[0.0, 5.0, 10.0],
                },
                Series {
                    label: "k2",
                    points: &[2.0],
                },
            ],
        )
        .into_string();
        assert!(svg.contains(r#"<polyline class="l0" fill="none" points="48.0,168.0 320.0,88.0 592.0,8.0"><title>k1</title></polyline>"#), "{svg}");
        assert!(svg.contains(r#"<polyline class="l1" fill="none" stroke-dasharray="6 3" points="48.0,136.0"><title>k2</title></polyline>"#));
        assert!(svg.contains(">10</text>"));
        assert!(svg.contains(">5</text>"));
        assert!(svg.contains("<desc>tokens per minute, from 60 min ago to now. k1: total 15, last 10, peak 10. k2: total 2, last 2, peak 2.</desc>"));
        assert!(svg.contains(
            r#"<line class="l1" x1="0" x2="24" y1="4" y2="4" stroke-dasharray="6 3"></line></svg>k2</li>"#
        ));
        assert!(svg.starts_with(r#"<figure class="line-chart"><p class="chart-title" aria-hidden="true">Burn rate</p><svg class="chart line""#));
        assert!(!svg.contains("style="));
    }
}
