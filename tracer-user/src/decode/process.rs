//! Process arguments: what podtrace may show of them.
//!
//! Command lines of Kubernetes components can carry credentials
//! (`--token=…`, `--password …`). podtrace keeps argv for the facts spans need
//! (runc's subcommand and container id, the shim's id, the CNI plugin) and
//! replaces the value of any flag whose name suggests a secret.

/// Substrings of flag names whose values are never shown.
const SECRET_FLAG_WORDS: [&str; 6] = [
    "token",
    "password",
    "passwd",
    "secret",
    "credential",
    "auth-key",
];

/// Replacement for a redacted value.
pub const REDACTED: &str = "[redacted]";

fn is_secret_flag(flag: &str) -> bool {
    let name = flag.trim_start_matches('-').to_ascii_lowercase();
    flag.starts_with('-') && SECRET_FLAG_WORDS.iter().any(|word| name.contains(word))
}

/// Redacts values of secret-looking flags, in both `--flag=value` and
/// `--flag value` forms.
pub fn redact_argv(argv: &mut [String]) {
    let mut redact_next = false;
    for arg in argv.iter_mut() {
        if redact_next {
            *arg = REDACTED.to_owned();
            redact_next = false;
            continue;
        }
        match arg.split_once('=') {
            Some((flag, _)) if is_secret_flag(flag) => *arg = format!("{flag}={REDACTED}"),
            Some(_) => {}
            None => redact_next = is_secret_flag(arg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redacted(args: &[&str]) -> Vec<String> {
        let mut argv: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        redact_argv(&mut argv);
        argv
    }

    #[test]
    fn secret_flag_values_are_redacted_in_both_forms() {
        assert_eq!(
            redacted(&[
                "kubelet",
                "--token=abc",
                "--bootstrap-Token",
                "xyz",
                "--v=2"
            ]),
            [
                "kubelet",
                "--token=[redacted]",
                "--bootstrap-Token",
                "[redacted]",
                "--v=2"
            ]
        );
        assert_eq!(
            redacted(&["etcd", "--password", "pw", "--name", "n1"]),
            ["etcd", "--password", "[redacted]", "--name", "n1"]
        );
    }

    #[test]
    fn runc_arguments_are_kept() {
        let args = [
            "runc",
            "--root",
            "/run/containerd/runc/k8s.io",
            "create",
            "--bundle",
            "/b",
            "abc123",
        ];
        assert_eq!(redacted(&args), args);
    }

    #[test]
    fn positional_words_are_not_flags() {
        assert_eq!(
            redacted(&["sh", "-c", "echo token"]),
            ["sh", "-c", "echo token"]
        );
        assert_eq!(
            redacted(&["tool", "token", "value"]),
            ["tool", "token", "value"]
        );
    }
}
