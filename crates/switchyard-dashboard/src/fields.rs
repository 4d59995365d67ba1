//! Small pieces the management pages share: reading a posted form's fields (repeated
//! keys included, which `serde_urlencoded` cannot put into a struct's `Vec`), and the
//! markup of hidden fields, labelled inputs, state labels and dates.

use maud::{html, Markup};
use serde::de::DeserializeOwned;
use serde_json::Value;
use switchyard_gateway::error::ApiError;

/// A posted form's fields in order, repeated names included.
pub type Fields = Vec<(String, String)>;

/// The first value of `name`, or empty.
pub fn one(fields: &Fields, name: &str) -> String {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// Every value of `name`, in order.
pub fn all(fields: &Fields, name: &str) -> Vec<String> {
    fields
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .collect()
}

/// `None` when `items` is empty, else `Some(items)`.
pub fn some_if_any(items: Vec<String>) -> Option<Vec<String>> {
    (!items.is_empty()).then_some(items)
}

/// A comma-separated list, trimmed, without empty items.
pub fn comma_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A field's trimmed value, or `None` when it is blank.
pub fn non_blank(text: &str) -> Option<String> {
    let t = text.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

/// A number field as JSON: absent when blank, a number when it is one, else the text
/// (which the input type then refuses, naming the field).
pub fn number(text: &str) -> Value {
    match non_blank(text) {
        None => Value::Null,
        Some(t) => t.parse::<u64>().map_or(Value::String(t), Value::from),
    }
}

/// `fields` (a JSON object built from a form) read as the management API's input type
/// `T`; a mismatch is the `400 invalid_json` the API answers, with serde's message.
pub fn parse<T: DeserializeOwned>(fields: Value) -> Result<T, ApiError> {
    serde_json::from_value(fields).map_err(|e| ApiError::bad_request("invalid_json", e.to_string()))
}

/// A hidden form field.
pub fn hidden(name: &str, value: &str) -> Markup {
    html! { input type="hidden" name=(name) value=(value); }
}

/// A `<label for>` and its `<input>` of type `kind`.
pub fn input(id: &str, name: &str, label: &str, kind: &str, value: &str, required: bool) -> Markup {
    html! {
        label for=(id) { (label) }
        input type=(kind) id=(id) name=(name) value=(value) required[required];
    }
}

/// A checkbox followed by its `<label for>`.
pub fn checkbox(id: &str, name: &str, value: &str, label: &str, checked: bool) -> Markup {
    html! {
        input type="checkbox" name=(name) value=(value) id=(id) checked[checked];
        " "
        label for=(id) { (label) }
    }
}

/// A state as a text label with its class: `HALF_OPEN` → `state state-half-open`.
pub fn state_label(state: &str) -> Markup {
    html! {
        span class={ "state state-" (state.to_ascii_lowercase().replace('_', "-")) } { (state) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_with_repeated_names() {
        let f: Fields = vec![
            ("a".into(), "1".into()),
            ("b".into(), "x".into()),
            ("a".into(), "2".into()),
        ];
        assert_eq!(one(&f, "a"), "1");
        assert_eq!(one(&f, "c"), "");
        assert_eq!(all(&f, "a"), ["1", "2"]);
        assert_eq!(some_if_any(all(&f, "c")), None);
        assert_eq!(comma_list(" m1, ,m2 "), ["m1", "m2"]);
        assert_eq!(non_blank("  "), None);
        assert_eq!(non_blank(" x "), Some("x".to_owned()));
        assert_eq!(number(""), Value::Null);
        assert_eq!(number(" 4 "), Value::from(4));
        assert_eq!(number("four"), Value::from("four"));
    }

    #[test]
    fn states_are_text_labels_with_a_class() {
        assert_eq!(
            state_label("HALF_OPEN").into_string(),
            r#"<span class="state state-half-open">HALF_OPEN</span>"#
        );
        assert_eq!(
            state_label("credits_exhausted").into_string(),
            r#"<span class="state state-credits-exhausted">credits_exhausted</span>"#
        );
        assert_eq!(
            checkbox("s-a", "scope", "a\"", "A", true).into_string(),
            r#"<input type="checkbox" name="scope" value="a&quot;" id="s-a" checked> <label for="s-a">A</label>"#
        );
    }
}
