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

/// A whole page: `title` (escaped) and `main` (already HTML), with the stylesheet at
/// `css` and, when signed in, the sign-out form carrying `csrf`.
pub fn page(title: &str, css: &str, csrf: Option<&str>, main: &str) -> String {
    let sign_out = csrf.map_or_else(String::new, |token| {
        format!(
            r#"<form method="post" action="/dashboard/sign-out"><input type="hidden" name="csrf" value="{}"><button type="submit">Sign out</button></form>"#,
            escape(token)
        )
    });
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Switchyard</title>
<link rel="stylesheet" href="{css}">
</head>
<body>
<header><p class="brand">Switchyard</p>{sign_out}</header>
<main>
<h1>{title}</h1>
{main}
</main>
</body>
</html>
"#,
        title = escape(title),
        css = escape(css),
    )
}

/// A table with `caption`, the column `headers` and `rows` of cells (each escaped); an
/// empty table says `empty` in one row instead.
pub fn table(caption: &str, headers: &[&str], rows: &[Vec<String>], empty: &str) -> String {
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
        for cell in row {
            let _ = write!(out, "<td>{}</td>", escape(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    out
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
    fn page_escapes_the_title_and_carries_the_csrf_token() {
        let html = page(
            "A <b>",
            "/dashboard/assets/app.css",
            Some("t\"1"),
            "<p>x</p>",
        );
        assert!(html.contains("<title>A &lt;b&gt; · Switchyard</title>"));
        assert!(html.contains(r#"<input type="hidden" name="csrf" value="t&quot;1">"#));
        assert!(html.contains("<main>\n<h1>A &lt;b&gt;</h1>\n<p>x</p>\n</main>"));
        assert!(!page("Sign in", "/c.css", None, "").contains("sign-out"));
    }
}
