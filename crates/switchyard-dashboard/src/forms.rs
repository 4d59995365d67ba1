//! The quota forms' rows of fields: a pool's or a plan's dimensions (unit, window,
//! limit) and a new pool's allocations (key, weight, policy, cap and its unit), posted
//! as indexed fields (`dim[0].unit`, `alloc[1].weight`). Rows are added and removed
//! without script: a submit button `add=dim` or `remove=alloc-1` posts the form, and the
//! page comes back with one row more or less and every value kept.
//!
//! The rows are only mapped to the API's input structs here; `services::quota` judges
//! them, and its error, which names the field at fault (`dimensions[1].limit`), is
//! shown beside the row it names (blank rows are left out, so the API's index is
//! mapped back to the form's row).

use maud::{html, Markup};
use std::collections::BTreeMap;
use switchyard_core::quota::pool::{AllocationInput, DimensionInput};
use switchyard_gateway::error::ApiError;

/// The units a dimension or a cap may be in.
pub const UNITS: [&str; 4] = ["requests", "tokens", "percent", "usd"];

/// The rolling windows a dimension may have.
pub const WINDOWS: [&str; 5] = ["5h", "hourly", "daily", "weekly", "monthly"];

/// The policies an allocation may have.
const POLICIES: [&str; 3] = ["hard", "soft", "burst"];

/// One dimension row as posted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DimRow {
    pub unit: String,
    pub window: String,
    pub limit: String,
}

/// One allocation row as posted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AllocRow {
    pub key: String,
    pub weight: String,
    pub policy: String,
    pub cap: String,
    pub cap_unit: String,
}

/// The rows of kind `prefix` (`dim`, `alloc`): each index's named fields, in index
/// order.
fn indexed<'a>(
    fields: &'a [(String, String)],
    prefix: &str,
) -> BTreeMap<usize, Vec<(&'a str, &'a str)>> {
    let mut rows: BTreeMap<usize, Vec<(&str, &str)>> = BTreeMap::new();
    for (k, v) in fields {
        let parsed = k
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('['))
            .and_then(|rest| rest.split_once("]."))
            .and_then(|(i, name)| i.parse::<usize>().ok().map(|i| (i, name)));
        if let Some((i, name)) = parsed {
            rows.entry(i).or_default().push((name, v.as_str()));
        }
    }
    rows
}

/// The value of `name` among a row's fields, trimmed, or empty.
fn get(row: &[(&str, &str)], name: &str) -> String {
    row.iter()
        .find(|(k, _)| *k == name)
        .map_or("", |(_, v)| v.trim())
        .to_owned()
}

/// The dimension rows posted, in order.
pub fn dim_rows(fields: &[(String, String)]) -> Vec<DimRow> {
    indexed(fields, "dim")
        .into_values()
        .map(|r| DimRow {
            unit: get(&r, "unit"),
            window: get(&r, "window"),
            limit: get(&r, "limit"),
        })
        .collect()
}

/// The allocation rows posted, in order.
pub fn alloc_rows(fields: &[(String, String)]) -> Vec<AllocRow> {
    indexed(fields, "alloc")
        .into_values()
        .map(|r| AllocRow {
            key: get(&r, "key"),
            weight: get(&r, "weight"),
            policy: get(&r, "policy"),
            cap: get(&r, "cap"),
            cap_unit: get(&r, "capunit"),
        })
        .collect()
}

/// A row button's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit {
    AddDim,
    AddAlloc,
    RemoveDim(usize),
    RemoveAlloc(usize),
}

/// The row button the form was posted with, if any (`add=dim`, `remove=alloc-2`).
pub fn edit(fields: &[(String, String)]) -> Option<Edit> {
    fields
        .iter()
        .find_map(|(k, v)| match (k.as_str(), v.as_str()) {
            ("add", "dim") => Some(Edit::AddDim),
            ("add", "alloc") => Some(Edit::AddAlloc),
            ("remove", v) => {
                let (kind, i) = v.split_once('-')?;
                let i = i.parse().ok()?;
                match kind {
                    "dim" => Some(Edit::RemoveDim(i)),
                    "alloc" => Some(Edit::RemoveAlloc(i)),
                    _ => None,
                }
            }
            _ => None,
        })
}

/// `rows` with `edit` applied to them.
pub fn apply(edit: Edit, dims: &mut Vec<DimRow>, allocs: &mut Vec<AllocRow>) {
    match edit {
        Edit::AddDim => dims.push(DimRow::default()),
        Edit::AddAlloc => allocs.push(AllocRow::default()),
        Edit::RemoveDim(i) if i < dims.len() => {
            dims.remove(i);
        }
        Edit::RemoveAlloc(i) if i < allocs.len() => {
            allocs.remove(i);
        }
        Edit::RemoveDim(_) | Edit::RemoveAlloc(_) => {}
    }
}

/// A form field the API would refuse before it could read it, named as the API names
/// its fields.
pub fn unreadable(field: String, message: &str) -> ApiError {
    ApiError::InvalidField {
        message: format!("{field}: {message}"),
        field,
    }
}

/// `text` as the number the API's field `field` takes.
fn number(field: String, text: &str) -> Result<f64, ApiError> {
    text.parse::<f64>()
        .map_err(|_| unreadable(field, &format!("`{text}` is not a number")))
}

/// The form rows the dimensions come from, in the API's order: a row without a limit
/// is left out (a new row is blank).
pub fn dim_from(rows: &[DimRow]) -> Vec<usize> {
    (0..rows.len())
        .filter(|i| !rows[*i].limit.is_empty())
        .collect()
}

/// The form rows the allocations come from, in the API's order: a row without a key
/// is left out.
pub fn alloc_from(rows: &[AllocRow]) -> Vec<usize> {
    (0..rows.len())
        .filter(|i| !rows[*i].key.is_empty())
        .collect()
}

/// The dimensions the rows describe (see [`dim_from`]).
pub fn dimensions(rows: &[DimRow]) -> Result<Vec<DimensionInput>, ApiError> {
    let mut out = Vec::new();
    for (k, i) in dim_from(rows).into_iter().enumerate() {
        let r = &rows[i];
        out.push(DimensionInput {
            unit: r.unit.clone(),
            window: r.window.clone(),
            limit: number(format!("dimensions[{k}].limit"), &r.limit)?,
        });
    }
    Ok(out)
}

/// The allocations the rows describe (see [`alloc_from`]): an empty weight is 0, an
/// empty policy `hard`, an empty cap none.
pub fn allocations(rows: &[AllocRow]) -> Result<Vec<AllocationInput>, ApiError> {
    let mut out = Vec::new();
    for (k, i) in alloc_from(rows).into_iter().enumerate() {
        let r = &rows[i];
        out.push(AllocationInput {
            api_key_id: r.key.clone(),
            allocation_weight: if r.weight.is_empty() {
                0.0
            } else {
                number(format!("allocations[{k}].allocationWeight"), &r.weight)?
            },
            cap_value: if r.cap.is_empty() {
                None
            } else {
                Some(number(format!("allocations[{k}].capValue"), &r.cap)?)
            },
            cap_unit: (!r.cap_unit.is_empty()).then(|| r.cap_unit.clone()),
            policy: if r.policy.is_empty() {
                "hard".to_owned()
            } else {
                r.policy.clone()
            },
        });
    }
    Ok(out)
}

/// An error placed on the form: beside a row of `section` (`dimensions`, `allocations`)
/// and its field (the API's name, `limit`), or above the form (`row` none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub section: String,
    pub row: Option<usize>,
    pub field: String,
    pub message: String,
}

/// Where the API's `error` belongs on the form: `dimensions[k].limit` beside the form
/// row `dim_from[k]`; any other error above the form.
pub fn place(error: &ApiError, dim_from: &[usize], alloc_from: &[usize]) -> Placed {
    let message = error.to_string();
    let named = match error {
        ApiError::InvalidField { field, .. } => {
            field.split_once('[').and_then(|(section, rest)| {
                let (k, field) = rest.split_once(']')?;
                let k: usize = k.parse().ok()?;
                let from = match section {
                    "dimensions" => dim_from,
                    "allocations" => alloc_from,
                    _ => return None,
                };
                Some((
                    section.to_owned(),
                    *from.get(k)?,
                    field.trim_start_matches('.').to_owned(),
                ))
            })
        }
        _ => None,
    };
    match named {
        Some((section, row, field)) => Placed {
            section,
            row: Some(row),
            field,
            message,
        },
        None => Placed {
            section: String::new(),
            row: None,
            field: String::new(),
            message,
        },
    }
}

/// The first element of a form with row buttons: its own submit button, labelled
/// `label`, off screen and out of the tab order, so that Enter in a field submits the
/// form rather than the first row's Remove (the browser submits with the first button).
pub fn default_submit(label: &str) -> Markup {
    html! {
        button.default-submit type="submit" tabindex="-1" aria-hidden="true" { (label) }
    }
}

/// The error of `section`'s row `i`, if it is the one placed there.
fn error_of<'a>(placed: Option<&'a Placed>, section: &str, i: usize) -> Option<&'a Placed> {
    placed.filter(|p| p.section == section && p.row == Some(i))
}

/// A `<select>` of `options` with `current` chosen (kept as an option when it is not
/// one of them, so a refused value is shown back); `blank` adds a first empty option.
fn select(
    name: &str,
    label: &str,
    options: &[&str],
    current: &str,
    blank: Option<&str>,
    invalid: Option<&str>,
) -> Markup {
    let foreign = !current.is_empty() && !options.contains(&current);
    html! {
        select name=(name) aria-label=(label) aria-invalid=[invalid.map(|_| "true")] aria-describedby=[invalid] {
            @if let Some(b) = blank { option value="" selected[current.is_empty()] { (b) } }
            @for o in options { option value=(o) selected[*o == current] { (o) } }
            @if foreign { option value=(current) selected { (current) } }
        }
    }
}

/// A number `<input>`.
fn number_input(name: &str, label: &str, value: &str, invalid: Option<&str>) -> Markup {
    html! {
        input type="number" name=(name) value=(value) min="0" step="any" aria-label=(label)
            aria-invalid=[invalid.map(|_| "true")] aria-describedby=[invalid];
    }
}

/// The error line under a row, and the id the row's fields point to.
fn error_row(id: &str, columns: usize, placed: Option<&Placed>) -> Markup {
    html! {
        @if let Some(p) = placed {
            tr.row-error {
                td colspan=(columns) {
                    p.notice.error.field-error role="alert" id=(id) { "Error: " (p.message) }
                }
            }
        }
    }
}

/// The dimension rows of a form, each with its remove button, and the add button.
/// `placed` is shown beside the row it names.
pub fn dimension_rows(rows: &[DimRow], placed: Option<&Placed>) -> Markup {
    html! {
        div.table-wrap {
            table.rows id="dim-rows" {
                caption { "Dimensions" }
                thead {
                    tr {
                        th scope="col" { "Unit" }
                        th scope="col" { "Window" }
                        th scope="col" { "Limit" }
                        th scope="col" { "Row" }
                    }
                }
                tbody {
                    @for (i, r) in rows.iter().enumerate() {
                        @let error = error_of(placed, "dimensions", i);
                        @let id = format!("dim-{i}-error");
                        @let at = |f: &str| error.filter(|p| p.field == f || p.field.is_empty()).map(|_| id.as_str());
                        tr id={ "dim-" (i) } {
                            td { (select(&format!("dim[{i}].unit"), &format!("Unit of dimension {}", i + 1), &UNITS, &r.unit, None, at("unit"))) }
                            td { (select(&format!("dim[{i}].window"), &format!("Window of dimension {}", i + 1), &WINDOWS, &r.window, None, at("window"))) }
                            td { (number_input(&format!("dim[{i}].limit"), &format!("Limit of dimension {}", i + 1), &r.limit, at("limit"))) }
                            td {
                                button type="submit" name="remove" value={ "dim-" (i) } formnovalidate
                                    aria-label={ "Remove dimension " (i + 1) } { "Remove" }
                            }
                        }
                        (error_row(&id, 4, error))
                    }
                }
            }
        }
        button.add type="submit" name="add" value="dim" formnovalidate { "Add a dimension" }
    }
}

/// The allocation rows of the create form, each with its remove button, and the add
/// button. `keys` are the keys to choose from; `placed` is shown beside its row.
pub fn allocation_rows(rows: &[AllocRow], keys: &[String], placed: Option<&Placed>) -> Markup {
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    html! {
        div.table-wrap {
            table.rows id="alloc-rows" {
                caption { "Initial allocations" }
                thead {
                    tr {
                        th scope="col" { "Key" }
                        th scope="col" { "Weight (%)" }
                        th scope="col" { "Policy" }
                        th scope="col" { "Cap" }
                        th scope="col" { "Cap unit" }
                        th scope="col" { "Row" }
                    }
                }
                tbody {
                    @for (i, r) in rows.iter().enumerate() {
                        @let error = error_of(placed, "allocations", i);
                        @let id = format!("alloc-{i}-error");
                        @let at = |f: &str| error.filter(|p| p.field == f || p.field.is_empty()).map(|_| id.as_str());
                        @let n = i + 1;
                        tr id={ "alloc-" (i) } {
                            td { (select(&format!("alloc[{i}].key"), &format!("Key of allocation {n}"), &keys, &r.key, Some("no key"), at("apiKeyId"))) }
                            td { (number_input(&format!("alloc[{i}].weight"), &format!("Weight of allocation {n} (%)"), &r.weight, at("allocationWeight"))) }
                            td { (select(&format!("alloc[{i}].policy"), &format!("Policy of allocation {n}"), &POLICIES, &r.policy, None, at("policy"))) }
                            td { (number_input(&format!("alloc[{i}].cap"), &format!("Cap of allocation {n}"), &r.cap, at("capValue"))) }
                            td { (select(&format!("alloc[{i}].capunit"), &format!("Cap unit of allocation {n}"), &UNITS, &r.cap_unit, Some("no cap"), at("capUnit"))) }
                            td {
                                button type="submit" name="remove" value={ "alloc-" (i) } formnovalidate
                                    aria-label={ "Remove allocation " (n) } { "Remove" }
                            }
                        }
                        (error_row(&id, 6, error))
                    }
                }
            }
        }
        button.add type="submit" name="add" value="alloc" formnovalidate { "Add an allocation" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posted(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn dim(unit: &str, window: &str, limit: &str) -> DimRow {
        DimRow {
            unit: unit.into(),
            window: window.into(),
            limit: limit.into(),
        }
    }

    #[test]
    fn indexed_rows_are_read_in_index_order() {
        let f = posted(&[
            ("csrf", "t"),
            ("dim[2].unit", "tokens"),
            ("dim[2].limit", " 5 "),
            ("dim[0].unit", "requests"),
            ("dim[0].window", "hourly"),
            ("dim[0].limit", "10"),
            ("dim[x].unit", "ignored"),
            ("alloc[0].key", "k1"),
            ("alloc[0].capunit", "tokens"),
        ]);
        assert_eq!(
            dim_rows(&f),
            [dim("requests", "hourly", "10"), dim("tokens", "", "5")]
        );
        assert_eq!(
            alloc_rows(&f),
            [AllocRow {
                key: "k1".into(),
                cap_unit: "tokens".into(),
                ..AllocRow::default()
            }]
        );
    }

    #[test]
    fn row_buttons_add_and_remove_rows() {
        let mut dims = vec![dim("requests", "hourly", "1"), dim("tokens", "5h", "2")];
        let mut allocs = vec![AllocRow::default()];
        assert_eq!(edit(&posted(&[("add", "dim")])), Some(Edit::AddDim));
        assert_eq!(
            edit(&posted(&[("remove", "alloc-3")])),
            Some(Edit::RemoveAlloc(3))
        );
        assert_eq!(edit(&posted(&[("remove", "pool-1")])), None);
        assert_eq!(edit(&posted(&[("id", "p")])), None);
        apply(Edit::RemoveDim(0), &mut dims, &mut allocs);
        assert_eq!(dims, [dim("tokens", "5h", "2")]);
        apply(Edit::RemoveDim(7), &mut dims, &mut allocs);
        apply(Edit::AddAlloc, &mut dims, &mut allocs);
        assert_eq!((dims.len(), allocs.len()), (1, 2));
    }

    #[test]
    fn rows_map_to_inputs_and_errors_back_to_their_rows() {
        let rows = [
            dim("requests", "hourly", ""),
            dim("requests", "hourly", "10"),
            dim("tokens", "5h", "-1"),
        ];
        let dims = dimensions(&rows).unwrap();
        let from = dim_from(&rows);
        assert_eq!(from, [1, 2]);
        assert_eq!(dims[1].limit, -1.0);
        let e = ApiError::InvalidField {
            field: "dimensions[1].limit".into(),
            message: "dimensions[1].limit: must be at least 0".into(),
        };
        assert_eq!(
            place(&e, &from, &[]),
            Placed {
                section: "dimensions".into(),
                row: Some(2),
                field: "limit".into(),
                message: "dimensions[1].limit: must be at least 0".into(),
            }
        );
        let other = ApiError::InvalidField {
            field: "id".into(),
            message: "id: empty".into(),
        };
        assert_eq!(place(&other, &from, &[]).row, None);
        let bad = dimensions(&[dim("requests", "hourly", "many")]).unwrap_err();
        assert_eq!(
            bad.to_string(),
            "dimensions[0].limit: `many` is not a number"
        );
        let allocs = [
            AllocRow::default(),
            AllocRow {
                key: "k1".into(),
                weight: "half".into(),
                ..AllocRow::default()
            },
        ];
        let bad = allocations(&allocs).unwrap_err();
        assert_eq!(
            bad.to_string(),
            "allocations[0].allocationWeight: `half` is not a number"
        );
        assert_eq!(place(&bad, &[], &[1]).row, Some(1));
        assert_eq!(alloc_from(&allocs), [1]);
        let inputs = allocations(&[AllocRow {
            key: "k1".into(),
            cap: "3".into(),
            cap_unit: "requests".into(),
            ..AllocRow::default()
        }])
        .unwrap();
        assert_eq!(
            inputs,
            [AllocationInput {
                api_key_id: "k1".into(),
                allocation_weight: 0.0,
                cap_value: Some(3.0),
                cap_unit: Some("requests".into()),
                policy: "hard".into(),
            }]
        );
    }

    #[test]
    fn an_error_is_shown_beside_its_row_and_marks_its_field() {
        let placed = Placed {
            section: "dimensions".into(),
            row: Some(1),
            field: "limit".into(),
            message: "dimensions[0].limit: must be <b>0</b> or more".into(),
        };
        let html = dimension_rows(
            &[dim("requests", "hourly", ""), dim("usd", "daily", "-1")],
            Some(&placed),
        )
        .into_string();
        assert!(html.contains(r#"<tr class="row-error"><td colspan="4"><p class="notice error field-error" role="alert" id="dim-1-error">Error: dimensions[0].limit: must be &lt;b&gt;0&lt;/b&gt; or more</p></td></tr>"#), "{html}");
        assert!(html.contains(r#"<input type="number" name="dim[1].limit" value="-1" min="0" step="any" aria-label="Limit of dimension 2" aria-invalid="true" aria-describedby="dim-1-error">"#));
        assert!(html.contains(r#"<input type="number" name="dim[0].limit" value="" min="0" step="any" aria-label="Limit of dimension 1">"#));
        assert!(html.contains(r#"<button type="submit" name="remove" value="dim-1" formnovalidate aria-label="Remove dimension 2">Remove</button>"#));
        assert!(html.contains(r#"<option value="usd" selected>usd</option>"#));
        assert_eq!(html.matches("row-error").count(), 1);
        assert!(!html.contains("style="));
    }
}
