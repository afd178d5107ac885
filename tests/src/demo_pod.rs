//! The Pod lines `podtrace-demo` prints on stdout, one JSON object each, as
//! the tests read them (the demo's own docs say what each field holds).

use serde::Deserialize;

/// One Pod the demo created. Fields a mode does not print are empty.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct DemoPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub sandbox_id: String,
    pub container_id: String,
    pub node: String,
    /// With `--k8s-bin`: the scenario that created it, and how it ended.
    pub scenario: String,
    pub outcome: String,
    /// Playing the roles: milliseconds from the create to the Running
    /// status stored.
    pub start_ms: Option<f64>,
    /// Playing the roles: why its sandbox could not be created (a
    /// `--broken-pods` Pod).
    pub error: Option<String>,
}

impl DemoPod {
    /// The Pod of one stdout line; `None` for a line that is not one (not a
    /// JSON object, or without a name).
    pub fn parse(line: &str) -> Option<Self> {
        let pod: Self = serde_json::from_str(line).ok()?;
        (!pod.name.is_empty()).then_some(pod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_both_modes_parse_and_others_do_not() {
        let played = DemoPod::parse(
            r#"{"namespace":"default","name":"demo-0","uid":"u","sandbox_id":"s","container_id":"c","node":"n","start_ms":812.5}"#,
        )
        .unwrap();
        assert_eq!(
            (played.name.as_str(), played.start_ms),
            ("demo-0", Some(812.5))
        );
        assert!(played.scenario.is_empty() && played.error.is_none());
        let k8s = DemoPod::parse(
            r#"{"namespace":"default","name":"web","uid":"u","sandbox_id":"","container_id":"","node":"","scenario":"rejected","outcome":"Forbidden","warnings":["w"]}"#,
        )
        .unwrap();
        assert_eq!(
            (k8s.scenario.as_str(), k8s.outcome.as_str()),
            ("rejected", "Forbidden")
        );
        assert!(DemoPod::parse("ready").is_none());
        assert!(DemoPod::parse(r#"{"uid":"u"}"#).is_none());
    }
}
