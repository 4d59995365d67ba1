//! HTML rendering helpers: the page layout every dashboard page shares, and the pieces
//! (live regions, forms, tables) the pages build on. Markup is maud's [`Markup`]: every
//! value spliced into it is escaped by the type, text and attribute values alike.

use maud::{html, Markup, DOCTYPE};

/// The dashboard's sections, in the order the navigation lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Overview,
    QuotaShare,
    Plans,
    Resilience,
    Keys,
    Providers,
    Combos,
    Sessions,
    Settings,
    Requests,
    /// Pages outside the navigation (sign-in, errors).
    None,
}

impl Nav {
    /// Every section with its path and label.
    pub const ALL: [(Nav, &'static str, &'static str); 10] = [
        (Nav::Overview, "/dashboard", "Overview"),
        (
            Nav::QuotaShare,
            "/dashboard/costs/quota-share",
            "Quota share",
        ),
        (Nav::Plans, "/dashboard/costs/quota-share/plans", "Plans"),
        (Nav::Resilience, "/dashboard/resilience", "Resilience"),
        (Nav::Keys, "/dashboard/keys", "Keys"),
        (Nav::Providers, "/dashboard/providers", "Providers"),
        (Nav::Combos, "/dashboard/combos", "Combos"),
        (Nav::Sessions, "/dashboard/sessions", "Sessions"),
        (Nav::Settings, "/dashboard/settings", "Settings"),
        (Nav::Requests, "/dashboard/requests", "Requests"),
    ];
}

/// What every page shares: the assets' paths.
#[derive(Debug, Clone)]
pub struct Layout {
    pub css: String,
    pub js: String,
}

/// A page's parts: its title, its section, the signed-in session's CSRF token (none
/// when signed out: no navigation and no sign-out), a one-time notice and the `<main>`
/// content.
#[derive(Debug)]
pub struct Page<'a> {
    pub title: &'a str,
    pub nav: Nav,
    pub csrf: Option<&'a str>,
    pub notice: Option<&'a Notice>,
    pub main: Markup,
}

/// A one-time message shown above a page's content after an action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    Done(String),
    Failed(String),
}

impl Notice {
    fn render(&self) -> Markup {
        match self {
            Notice::Done(m) => html! {
                p.notice.done role="status" id="notice" { "Done: " (m) }
            },
            Notice::Failed(m) => error_notice(Some("notice"), m),
        }
    }
}

/// An error banner saying `message` (`id` names it, for the one-time notice).
pub fn error_notice(id: Option<&str>, message: &str) -> Markup {
    html! {
        p.notice.error role="alert" id=[id] { "Error: " (message) }
    }
}

/// A hint paragraph.
pub fn hint(text: &str) -> Markup {
    html! { p.hint { (text) } }
}

/// The `htmx` configuration every page carries: no inline styles, no eval, no scripts.
const HTMX_CONFIG: &str =
    r#"{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false}"#;

impl Layout {
    /// A whole page. Signed in, the page carries the navigation (the current section
    /// marked `aria-current`), the sign-out form and, for htmx requests, the CSRF token
    /// in `hx-headers`.
    pub fn page(&self, p: &Page<'_>) -> Markup {
        let hx_headers = p
            .csrf
            .map(|token| serde_json::json!({ "x-csrf-token": token }).to_string());
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    meta name="htmx-config" content=(HTMX_CONFIG);
                    title { (p.title) " · Switchyard" }
                    link rel="stylesheet" href=(self.css);
                    script src=(self.js) defer {}
                }
                body hx-headers=[hx_headers] {
                    a.skip href="#main" { "Skip to content" }
                    header {
                        p.brand { "Switchyard" }
                        @if let Some(token) = p.csrf {
                            nav aria-label="Sections" {
                                ul {
                                    @for (section, href, label) in Nav::ALL {
                                        li {
                                            a href=(href) aria-current=[(section == p.nav).then_some("page")] { (label) }
                                        }
                                    }
                                }
                            }
                            form method="post" action="/dashboard/sign-out" {
                                (csrf_field(token))
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                    main id="main" {
                        h1 { (p.title) }
                        @if let Some(n) = p.notice { (n.render()) }
                        (p.main)
                    }
                }
            }
        }
    }
}

/// A region that refreshes itself every `secs` seconds from `url` (the same page, of
/// which htmx keeps only the element with this `id`). Without htmx it is static.
pub fn live(id: &str, url: &str, secs: u32, content: Markup) -> Markup {
    html! {
        div id=(id) hx-get=(url) hx-trigger={ "every " (secs) "s" } hx-select={ "#" (id) } hx-swap="outerHTML" {
            (content)
        }
    }
}

/// A hidden CSRF field for a form.
pub fn csrf_field(token: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(token); }
}

/// A form posting to `action` with the CSRF field, `fields` and a submit button
/// labelled `button`; `class` styles it (`inline` for one-button forms).
pub fn form(action: &str, token: &str, class: &str, fields: Markup, button: &str) -> Markup {
    html! {
        form method="post" action=(action) class=(class) {
            (csrf_field(token))
            (fields)
            button type="submit" { (button) }
        }
    }
}

/// A destructive action in two steps without JavaScript: a `<details>` whose
/// `summary` (keyboard-focusable) unfolds a form posting to `action` with the CSRF
/// field and one submit button labelled `button`, which says what happens for good.
pub fn confirm_form(action: &str, token: &str, summary: &str, button: &str) -> Markup {
    html! {
        details.confirm {
            summary { (summary) }
            form method="post" action=(action) {
                (csrf_field(token))
                button type="submit" { (button) }
            }
        }
    }
}

/// A table with `caption`, the column `headers` and `rows` of cells; an empty table
/// says `empty` in one row instead. A cell is markup: text (`html! { (s) }`, escaped)
/// or elements (state labels, forms, inputs).
pub fn table(caption: &str, headers: &[&str], rows: &[Vec<Markup>], empty: &str) -> Markup {
    html! {
        div.table-wrap {
            table {
                caption { (caption) }
                thead { tr { @for h in headers { th scope="col" { (h) } } } }
                tbody {
                    @if rows.is_empty() {
                        tr { td colspan=(headers.len()) { (empty) } }
                    }
                    @for row in rows {
                        tr { @for c in row { td { (c) } } }
                    }
                }
            }
        }
    }
}

/// `text` as a table cell.
pub fn text(text: impl AsRef<str>) -> Markup {
    html! { (text.as_ref()) }
}

/// A time in Unix milliseconds as UTC `YYYY-MM-DD HH:MM:SS`.
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm), in the proleptic
    // Gregorian calendar; eras are 400 years long.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_escapes_cells_and_says_when_empty() {
        assert_eq!(
            table(
                "Keys",
                &["Id", "Name"],
                &[vec![text("k<1>"), text("a&b")]],
                "None."
            )
            .into_string(),
            r#"<div class="table-wrap"><table><caption>Keys</caption><thead><tr><th scope="col">Id</th><th scope="col">Name</th></tr></thead><tbody><tr><td>k&lt;1&gt;</td><td>a&amp;b</td></tr></tbody></table></div>"#
        );
        assert_eq!(
            table("Keys", &["Id"], &[], "No keys.").into_string(),
            r#"<div class="table-wrap"><table><caption>Keys</caption><thead><tr><th scope="col">Id</th></tr></thead><tbody><tr><td colspan="1">No keys.</td></tr></tbody></table></div>"#
        );
    }

    #[test]
    fn table_keeps_markup_cells_and_escapes_the_rest() {
        assert_eq!(
            table("A&B", &["<x>"], &[vec![html! { b { "1" } }]], "None.").into_string(),
            r#"<div class="table-wrap"><table><caption>A&amp;B</caption><thead><tr><th scope="col">&lt;x&gt;</th></tr></thead><tbody><tr><td><b>1</b></td></tr></tbody></table></div>"#
        );
    }

    fn layout() -> Layout {
        Layout {
            css: "/dashboard/assets/app.css".into(),
            js: "/dashboard/assets/htmx.js".into(),
        }
    }

    #[test]
    fn page_escapes_the_title_and_carries_the_csrf_token() {
        let notice = Notice::Failed("bad <input>".into());
        let html = layout()
            .page(&Page {
                title: "A <b>",
                nav: Nav::Keys,
                csrf: Some("t\"1"),
                notice: Some(&notice),
                main: html! { p { "x" } },
            })
            .into_string();
        assert!(html.starts_with("<!DOCTYPE html><html lang=\"en\"><head>"));
        assert!(html.contains("<title>A &lt;b&gt; · Switchyard</title>"));
        assert!(html.contains(r#"<input type="hidden" name="csrf" value="t&quot;1">"#));
        assert!(html
            .contains(r#"<body hx-headers="{&quot;x-csrf-token&quot;:&quot;t\&quot;1&quot;}">"#));
        assert!(html.contains(
            r#"<h1>A &lt;b&gt;</h1><p class="notice error" role="alert" id="notice">Error: bad &lt;input&gt;</p><p>x</p></main>"#
        ));
        assert!(html.contains(r#"<li><a href="/dashboard/keys" aria-current="page">Keys</a></li>"#));
        assert!(html.contains(r#"<li><a href="/dashboard">Overview</a></li>"#));
        assert!(html.contains(r#"<script src="/dashboard/assets/htmx.js" defer></script>"#));
        assert!(html.contains(r#"<meta name="htmx-config" content="{&quot;includeIndicatorStyles&quot;:false,&quot;allowEval&quot;:false,&quot;allowScriptTags&quot;:false}">"#));
        let signed_out = layout()
            .page(&Page {
                title: "Sign in",
                nav: Nav::None,
                csrf: None,
                notice: None,
                main: html! {},
            })
            .into_string();
        assert!(!signed_out.contains("sign-out"));
        assert!(!signed_out.contains("<nav"));
        assert!(signed_out.contains("<body>"));
    }

    #[test]
    fn live_regions_and_forms() {
        assert_eq!(
            live("pools", "/dashboard/x?a=1&b=2", 30, html! { p { "y" } }).into_string(),
            r##"<div id="pools" hx-get="/dashboard/x?a=1&amp;b=2" hx-trigger="every 30s" hx-select="#pools" hx-swap="outerHTML"><p>y</p></div>"##
        );
        assert_eq!(
            form(
                "/dashboard/keys/k1/revoke",
                "tok",
                "inline",
                html! {},
                "Revoke"
            )
            .into_string(),
            r#"<form method="post" action="/dashboard/keys/k1/revoke" class="inline"><input type="hidden" name="csrf" value="tok"><button type="submit">Revoke</button></form>"#
        );
        assert_eq!(
            confirm_form(
                "/dashboard/combos/a&b/delete",
                "tok",
                "Delete a&b…",
                "Delete combo a&b for good"
            )
            .into_string(),
            r#"<details class="confirm"><summary>Delete a&amp;b…</summary><form method="post" action="/dashboard/combos/a&amp;b/delete"><input type="hidden" name="csrf" value="tok"><button type="submit">Delete combo a&amp;b for good</button></form></details>"#
        );
        assert_eq!(
            Notice::Done("Saved.".into()).render().into_string(),
            r#"<p class="notice done" role="status" id="notice">Done: Saved.</p>"#
        );
    }

    #[test]
    fn times_read_as_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_764_606_653_999), "2025-12-01 16:30:53");
        assert_eq!(utc(4_107_542_399_000), "2100-02-28 23:59:59");
    }
}
