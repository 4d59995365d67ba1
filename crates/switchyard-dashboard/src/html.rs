//! HTML rendering helpers: escaping and the page layout every dashboard page shares.
//! Pages are built with `format!`; every value that comes from the configuration, the
//! request log or the client goes through [`escape`].

use std::fmt::Write;

/// `text` with the five characters that are special in HTML text and attribute values
/// replaced by their entities.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

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
    Settings,
    Requests,
    /// Pages outside the navigation (sign-in, errors).
    None,
}

impl Nav {
    /// Every section with its path and label.
    pub const ALL: [(Nav, &'static str, &'static str); 9] = [
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

/// A page's parts: its title (escaped here), its section, the signed-in session's CSRF
/// token (none when signed out: no navigation and no sign-out), a one-time notice and
/// the `<main>` content (already HTML).
#[derive(Debug)]
pub struct Page<'a> {
    pub title: &'a str,
    pub nav: Nav,
    pub csrf: Option<&'a str>,
    pub notice: Option<&'a Notice>,
    pub main: &'a str,
}

/// A one-time message shown above a page's content after an action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    Done(String),
    Failed(String),
}

impl Notice {
    fn render(&self) -> String {
        match self {
            Notice::Done(m) => format!(
                r#"<p class="notice done" role="status" id="notice">Done: {}</p>"#,
                escape(m)
            ),
            Notice::Failed(m) => format!(
                r#"<p class="notice error" role="alert" id="notice">Error: {}</p>"#,
                escape(m)
            ),
        }
    }
}

impl Layout {
    /// A whole page. Signed in, the page carries the navigation (the current section
    /// marked `aria-current`), the sign-out form and, for htmx requests, the CSRF token
    /// in `hx-headers`.
    pub fn page(&self, p: &Page<'_>) -> String {
        let (nav, sign_out, hx_headers) = match p.csrf {
            None => (String::new(), String::new(), String::new()),
            Some(token) => {
                let mut nav = String::from(r#"<nav aria-label="Sections"><ul>"#);
                for (section, href, label) in Nav::ALL {
                    let current = if section == p.nav {
                        r#" aria-current="page""#
                    } else {
                        ""
                    };
                    let _ = write!(nav, r#"<li><a href="{href}"{current}>{label}</a></li>"#);
                }
                nav.push_str("</ul></nav>");
                (
                    nav,
                    format!(
                        r#"<form method="post" action="/dashboard/sign-out"><input type="hidden" name="csrf" value="{}"><button type="submit">Sign out</button></form>"#,
                        escape(token)
                    ),
                    format!(r#" hx-headers='{{"x-csrf-token":"{}"}}'"#, escape(token)),
                )
            }
        };
        let notice = p.notice.map_or_else(String::new, Notice::render);
        format!(
            r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="htmx-config" content='{{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false}}'>
<title>{title} · Switchyard</title>
<link rel="stylesheet" href="{css}">
<script src="{js}" defer></script>
</head>
<body{hx_headers}>
<a class="skip" href="#main">Skip to content</a>
<header><p class="brand">Switchyard</p>{nav}{sign_out}</header>
<main id="main">
<h1>{title}</h1>
{notice}{main}
</main>
</body>
</html>
"##,
            title = escape(p.title),
            css = escape(&self.css),
            js = escape(&self.js),
            main = p.main,
        )
    }
}

/// A region that refreshes itself every `secs` seconds from `url` (the same page, of
/// which htmx keeps only the element with this `id`). Without htmx it is static.
pub fn live(id: &str, url: &str, secs: u32, content: &str) -> String {
    format!(
        r##"<div id="{id}" hx-get="{url}" hx-trigger="every {secs}s" hx-select="#{id}" hx-swap="outerHTML">{content}</div>"##,
        id = escape(id),
        url = escape(url),
    )
}

/// A hidden CSRF field for a form.
pub fn csrf_field(token: &str) -> String {
    format!(
        r#"<input type="hidden" name="csrf" value="{}">"#,
        escape(token)
    )
}

/// A form posting to `action` with the CSRF field, `fields` (HTML) and a submit
/// button labelled `button`; `class` styles it (`inline` for one-button forms).
pub fn form(action: &str, token: &str, class: &str, fields: &str, button: &str) -> String {
    format!(
        r#"<form method="post" action="{action}" class="{class}">{csrf}{fields}<button type="submit">{button}</button></form>"#,
        action = escape(action),
        class = escape(class),
        csrf = csrf_field(token),
        button = escape(button),
    )
}

/// A destructive action in two steps without JavaScript: a `<details>` whose
/// `summary` (keyboard-focusable) unfolds a form posting to `action` with the CSRF
/// field and one submit button labelled `button`, which says what happens for good.
pub fn confirm_form(action: &str, token: &str, summary: &str, button: &str) -> String {
    format!(
        r#"<details class="confirm"><summary>{summary}</summary><form method="post" action="{action}">{csrf}<button type="submit">{button}</button></form></details>"#,
        summary = escape(summary),
        action = escape(action),
        csrf = csrf_field(token),
        button = escape(button),
    )
}

/// A table with `caption`, the column `headers` and `rows` of cells (each escaped); an
/// empty table says `empty` in one row instead.
pub fn table(caption: &str, headers: &[&str], rows: &[Vec<String>], empty: &str) -> String {
    table_with(caption, headers, rows, empty, escape)
}

/// A table like [`table`] whose cells are HTML already (state labels, forms, inputs):
/// the caller escapes every value in them. The caption and headers are escaped here.
pub fn table_html(caption: &str, headers: &[&str], rows: &[Vec<String>], empty: &str) -> String {
    table_with(caption, headers, rows, empty, str::to_owned)
}

fn table_with(
    caption: &str,
    headers: &[&str],
    rows: &[Vec<String>],
    empty: &str,
    cell: fn(&str) -> String,
) -> String {
    let mut out = format!(
        r#"<div class="table-wrap"><table><caption>{}</caption><thead><tr>"#,
        escape(caption)
    );
    for h in headers {
        let _ = write!(out, r#"<th scope="col">{}</th>"#, escape(h));
    }
    out.push_str("</tr></thead><tbody>");
    if rows.is_empty() {
        let _ = write!(
            out,
            r#"<tr><td colspan="{}">{}</td></tr>"#,
            headers.len(),
            escape(empty)
        );
    }
    for row in rows {
        out.push_str("<tr>");
        for c in row {
            let _ = write!(out, "<td>{}</td>", cell(c));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    out
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
    fn escape_replaces_the_special_characters() {
        assert_eq!(
            escape(r#"<a href="x">Tom & 'Jerry'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;"
        );
        assert_eq!(escape("plain é text"), "plain é text");
    }

    #[test]
    fn table_escapes_cells_and_says_when_empty() {
        assert_eq!(
            table(
                "Keys",
                &["Id", "Name"],
                &[vec!["k<1>".into(), "a&b".into()]],
                "None."
            ),
            r#"<div class="table-wrap"><table><caption>Keys</caption><thead><tr><th scope="col">Id</th><th scope="col">Name</th></tr></thead><tbody><tr><td>k&lt;1&gt;</td><td>a&amp;b</td></tr></tbody></table></div>"#
        );
        assert_eq!(
            table("Keys", &["Id"], &[], "No keys."),
            r#"<div class="table-wrap"><table><caption>Keys</caption><thead><tr><th scope="col">Id</th></tr></thead><tbody><tr><td colspan="1">No keys.</td></tr></tbody></table></div>"#
        );
    }

    #[test]
    fn table_html_keeps_its_cells_and_escapes_the_rest() {
        assert_eq!(
            table_html("A&B", &["<x>"], &[vec!["<b>1</b>".into()]], "None."),
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
        let html = layout().page(&Page {
            title: "A <b>",
            nav: Nav::Keys,
            csrf: Some("t\"1"),
            notice: Some(&notice),
            main: "<p>x</p>",
        });
        assert!(html.contains("<title>A &lt;b&gt; · Switchyard</title>"));
        assert!(html.contains(r#"<input type="hidden" name="csrf" value="t&quot;1">"#));
        assert!(html.contains(r#"<body hx-headers='{"x-csrf-token":"t&quot;1"}'>"#));
        assert!(html.contains(
            "<h1>A &lt;b&gt;</h1>\n<p class=\"notice error\" role=\"alert\" id=\"notice\">Error: bad &lt;input&gt;</p><p>x</p>\n</main>"
        ));
        assert!(html.contains(r#"<li><a href="/dashboard/keys" aria-current="page">Keys</a></li>"#));
        assert!(html.contains(r#"<li><a href="/dashboard">Overview</a></li>"#));
        assert!(html.contains(r#"<script src="/dashboard/assets/htmx.js" defer></script>"#));
        let signed_out = layout().page(&Page {
            title: "Sign in",
            nav: Nav::None,
            csrf: None,
            notice: None,
            main: "",
        });
        assert!(!signed_out.contains("sign-out"));
        assert!(!signed_out.contains("<nav"));
        assert!(signed_out.contains("<body>"));
    }

    #[test]
    fn live_regions_and_forms() {
        assert_eq!(
            live("pools", "/dashboard/x?a=1&b=2", 30, "<p>y</p>"),
            r##"<div id="pools" hx-get="/dashboard/x?a=1&amp;b=2" hx-trigger="every 30s" hx-select="#pools" hx-swap="outerHTML"><p>y</p></div>"##
        );
        assert_eq!(
            form("/dashboard/keys/k1/revoke", "tok", "inline", "", "Revoke"),
            r#"<form method="post" action="/dashboard/keys/k1/revoke" class="inline"><input type="hidden" name="csrf" value="tok"><button type="submit">Revoke</button></form>"#
        );
        assert_eq!(
            confirm_form(
                "/dashboard/combos/a&b/delete",
                "tok",
                "Delete a&b…",
                "Delete combo a&b for good"
            ),
            r#"<details class="confirm"><summary>Delete a&amp;b…</summary><form method="post" action="/dashboard/combos/a&amp;b/delete"><input type="hidden" name="csrf" value="tok"><button type="submit">Delete combo a&amp;b for good</button></form></details>"#
        );
        assert_eq!(
            Notice::Done("Saved.".into()).render(),
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
