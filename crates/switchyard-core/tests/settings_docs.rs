//! `docs/settings.md` holds the table of every setting, generated from the registry
//! (`settings::DEFS`). This test renders the table and compares it with the page's; with
//! `SWITCHYARD_BLESS_DOCS=1` it rewrites the page's table instead.

use std::path::PathBuf;
use switchyard_core::settings::{SettingDef, SettingValue, DEFS};

const BLESS: &str = "SWITCHYARD_BLESS_DOCS=1 cargo test -p switchyard-core --test settings_docs";

/// What the page says before its table, when the page is written from scratch.
const INTRO: &str = "# Settings

Every runtime setting of the gateway. Values resolve by precedence, highest first: the
database (set through `PUT /api/settings/{key}` or the dashboard's settings page) → the
environment variable → the config file's `[settings]` table → the default.
`GET /api/settings` shows each value with its source.

`applies` says when a changed value takes effect:

- `live`: the next request, or the next use (a cleanup run, a shutdown), reads it.
- `new_connections`: client connections accepted after the change get it; connections
  already open keep the value they were accepted with.
- `restart`: read once at start; a stored change takes effect after a restart.

The table is generated from the settings registry (`crates/switchyard-core/src/settings.rs`)
and checked by a test; after changing the registry, regenerate it with
`SWITCHYARD_BLESS_DOCS=1 cargo test -p switchyard-core --test settings_docs`.

";

fn page() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/settings.md")
}

/// A table cell: `|` would end it.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn default(d: &SettingDef) -> String {
    match d.default_value() {
        SettingValue::Text(t) if t.is_empty() => "(none)".to_owned(),
        SettingValue::Text(t) => format!("`{t}`"),
        other => format!("`{}`", other.to_json()),
    }
}

/// The table, one row per setting in registry order.
fn table() -> Vec<String> {
    let mut rows = vec![
        "| key | env | default | applies | constraint | meaning |".to_owned(),
        "|---|---|---|---|---|---|".to_owned(),
    ];
    rows.extend(DEFS.iter().map(|d| {
        format!(
            "| `{}` | `{}` | {} | {} | {} | {} |",
            d.key,
            d.env,
            default(d),
            d.applies.as_str(),
            cell(&d.constraint()),
            cell(d.doc),
        )
    }));
    rows
}

/// The page split around its table (the first line starting `| key |` and the lines
/// starting `|` after it): what comes before, the table's lines, what comes after.
fn split(text: &str) -> Option<(String, Vec<String>, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.iter().position(|l| l.starts_with("| key |"))?;
    let end = lines[start..]
        .iter()
        .position(|l| !l.starts_with('|'))
        .map_or(lines.len(), |n| start + n);
    let before: String = lines[..start].iter().map(|l| format!("{l}\n")).collect();
    let after: String = lines[end..].iter().map(|l| format!("{l}\n")).collect();
    let table = lines[start..end].iter().map(|l| (*l).to_owned()).collect();
    Some((before, table, after))
}

#[test]
fn docs_settings_md_lists_every_setting_as_the_registry_does() {
    let want = table();
    let text = std::fs::read_to_string(page()).unwrap_or_default();
    let found = split(&text);
    if std::env::var("SWITCHYARD_BLESS_DOCS").as_deref() == Ok("1") {
        let (before, after) = match found {
            Some((before, _, after)) => (before, after),
            None => (INTRO.to_owned(), String::new()),
        };
        let rows: String = want.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(page(), format!("{before}{rows}{after}")).unwrap();
        return;
    }
    let Some((_, got, _)) = found else {
        panic!(
            "docs/settings.md has no settings table (a line starting `| key |`); write it with `{BLESS}`"
        );
    };
    if let Some(i) = (0..want.len().max(got.len())).find(|&i| want.get(i) != got.get(i)) {
        let show = |row: Option<&String>| row.map_or("(no line)", String::as_str).to_owned();
        panic!(
            "docs/settings.md's settings table differs from the registry (settings::DEFS) at table line {}:\n  docs:     {}\n  registry: {}\nRegenerate it with `{BLESS}` and review `git diff docs/settings.md`.",
            i + 1,
            show(got.get(i)),
            show(want.get(i)),
        );
    }
}

#[test]
fn the_page_is_split_around_its_table() {
    let text = "intro\n\n| key | a |\n|---|---|\n| `x` | 1 |\nafter\n";
    let (before, table, after) = split(text).unwrap();
    assert_eq!(before, "intro\n\n");
    assert_eq!(table, ["| key | a |", "|---|---|", "| `x` | 1 |"]);
    assert_eq!(after, "after\n");
    assert_eq!(split("no table\n"), None);
}
