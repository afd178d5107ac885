//! `podtrace check`: does this host give podtrace what it needs?
//!
//! One line per feature. Needed features decide the exit status; features
//! podtrace deliberately does without (kprobes, fentry/fexit) are reported
//! for information and never fail the check.

use std::{fmt, fs, path::Path};

use aya::{
    maps::MapType,
    programs::ProgramType,
    sys::{is_map_supported, is_program_supported},
};

use crate::capture::kernel_btf::{VMLINUX_BTF, kernel_offsets};

/// Whether podtrace depends on a feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// podtrace cannot run without it.
    Required,
    /// Used when present (e.g. for older kernels).
    Optional,
    /// podtrace does not use it; reported for information.
    NotUsed,
}

/// The outcome for one feature.
#[derive(Clone, Debug)]
pub struct Finding {
    /// Feature name.
    pub feature: &'static str,
    /// Whether podtrace needs it.
    pub need: Need,
    /// Whether the host has it.
    pub present: bool,
    /// What was seen, or what to do.
    pub detail: String,
}

impl Finding {
    /// Whether this finding fails the check.
    pub fn fails(&self) -> bool {
        self.need == Need::Required && !self.present
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mark = match (self.need, self.present) {
            (_, true) => "ok     ",
            (Need::Required, false) => "MISSING",
            (Need::Optional, false) => "absent ",
            (Need::NotUsed, false) => "n/a    ",
        };
        let need = match self.need {
            Need::Required => "",
            Need::Optional => " (optional)",
            Need::NotUsed => " (not used by podtrace)",
        };
        write!(f, "{mark} {:<18} {}{need}", self.feature, self.detail)
    }
}

/// Runs every check.
pub fn run_checks() -> Vec<Finding> {
    let caps = effective_capabilities();
    let mut findings = vec![
        kernel_version(),
        btf(),
        tracefs(),
        map_support(
            "ring buffer",
            MapType::RingBuf,
            "BPF_MAP_TYPE_RINGBUF needs Linux >= 5.8",
        ),
        program_support(
            "raw tracepoints",
            ProgramType::RawTracePoint,
            Need::Required,
        ),
        pmu(
            "uprobes",
            "uprobe",
            Need::Required,
            "CONFIG_UPROBE_EVENTS; Go TLS and gRPC probes need it",
        ),
    ];
    let multi_links = crate::capture::uprobe_links::kernel_has_multi_links();
    findings.push(uprobe_multi_links(multi_links.as_ref().err()));
    findings.extend(capabilities(caps, multi_links.is_ok()));
    findings.push(pmu(
        "kprobes",
        "kprobe",
        Need::NotUsed,
        "kernel built without kprobes",
    ));
    findings.push(fentry());
    findings
}

fn finding(feature: &'static str, need: Need, present: bool, detail: impl Into<String>) -> Finding {
    Finding {
        feature,
        need,
        present,
        detail: detail.into(),
    }
}

fn kernel_version() -> Finding {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let release = release.trim();
    let mut parts = release
        .split(['.', '-'])
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    let present = version >= (5, 8);
    let detail = if present {
        format!("Linux {release}")
    } else {
        format!("Linux {release}; podtrace needs >= 5.8")
    };
    finding("kernel", Need::Required, present, detail)
}

fn btf() -> Finding {
    match kernel_offsets(Path::new(VMLINUX_BTF)) {
        Ok(_) => finding(
            "BTF",
            Need::Required,
            true,
            format!("{VMLINUX_BTF}: every struct offset podtrace reads resolves"),
        ),
        Err(err) => finding("BTF", Need::Required, false, err.to_string()),
    }
}

fn tracefs() -> Finding {
    let mounted = [
        "/sys/kernel/tracing/events",
        "/sys/kernel/debug/tracing/events",
    ]
    .into_iter()
    .find(|path| Path::new(path).is_dir());
    // Raw tracepoints attach by name and uprobes through the uprobe PMU
    // (sysfs): neither needs tracefs. Reported for whoever debugs a host.
    match mounted {
        Some(path) => finding("tracefs", Need::NotUsed, true, format!("mounted ({path})")),
        None => finding("tracefs", Need::NotUsed, false, "not mounted"),
    }
}

fn map_support(feature: &'static str, map_type: MapType, missing: &str) -> Finding {
    match is_map_supported(map_type) {
        Ok(true) => finding(feature, Need::Required, true, "supported"),
        Ok(false) => finding(feature, Need::Required, false, missing.to_owned()),
        Err(err) => finding(
            feature,
            Need::Required,
            false,
            format!("cannot probe ({err}); run as root or with CAP_BPF"),
        ),
    }
}

fn program_support(feature: &'static str, program_type: ProgramType, need: Need) -> Finding {
    match is_program_supported(program_type) {
        Ok(true) => finding(feature, need, true, "supported"),
        Ok(false) => finding(
            feature,
            need,
            false,
            "the kernel does not support this program type",
        ),
        Err(err) => finding(feature, need, false, format!("cannot probe ({err})")),
    }
}

/// Perf PMUs for kprobe/uprobe: /sys/bus/event_source/devices/NAME/type.
fn pmu(feature: &'static str, name: &str, need: Need, missing: &str) -> Finding {
    let present = Path::new("/sys/bus/event_source/devices")
        .join(name)
        .join("type")
        .exists();
    let detail = if present {
        format!("{name} PMU present")
    } else {
        missing.to_owned()
    };
    finding(feature, need, present, detail)
}

fn uprobe_multi_links(missing: Option<&std::io::Error>) -> Finding {
    let feature = "uprobe multi links";
    match missing {
        None => finding(feature, Need::Optional, true, "supported"),
        Some(error) => finding(
            feature,
            Need::Optional,
            false,
            format!(
                "Linux >= 6.6 ({error}); the Go probes attach as one perf event each, which take the agent seconds more to stop"
            ),
        ),
    }
}

fn fentry() -> Finding {
    match is_program_supported(ProgramType::Tracing) {
        Ok(true) => finding("fentry/fexit", Need::NotUsed, true, "supported"),
        Ok(false) => finding("fentry/fexit", Need::NotUsed, false, "unavailable"),
        Err(err) => finding(
            "fentry/fexit",
            Need::NotUsed,
            false,
            format!("refused by the kernel ({err})"),
        ),
    }
}

/// Bits of CapEff in /proc/self/status.
fn effective_capabilities() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .unwrap_or(0)
}

const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYS_RESOURCE: u32 = 24;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// `multi_links`: the Go probes attach as uprobe multi links, through
/// bpf(2) (CAP_BPF + CAP_PERFMON), not perf_event_open.
fn capabilities(caps: u64, multi_links: bool) -> Vec<Finding> {
    let has = |cap: u32| caps & (1 << cap) != 0;
    let bpf = has(CAP_BPF) && has(CAP_PERFMON) || has(CAP_SYS_ADMIN);
    vec![
        finding(
            "CAP_BPF+PERFMON",
            Need::Required,
            bpf,
            if bpf {
                "held (or CAP_SYS_ADMIN)"
            } else {
                "needed to load programs and attach tracepoints and uprobes"
            },
        ),
        finding(
            "CAP_SYS_PTRACE",
            Need::Required,
            has(CAP_SYS_PTRACE),
            if has(CAP_SYS_PTRACE) {
                "held"
            } else {
                "needed to read /proc/PID/exe of other users' processes"
            },
        ),
        finding(
            "CAP_SYS_ADMIN",
            Need::Optional,
            has(CAP_SYS_ADMIN),
            if has(CAP_SYS_ADMIN) {
                "held"
            } else if multi_links {
                "not held: not needed here, the Go probes attach as uprobe multi links \
                 (perf-event uprobes, on kernels before 6.6 updated since July 2025, need it)"
            } else {
                "not held: Linux 6.16 and stable kernels updated since July 2025 require it to \
                 attach uprobes through perf events; without it there is no TLS plaintext or \
                 HTTP/2 headers from Go, only syscall data"
            },
        ),
        finding(
            "CAP_SYS_RESOURCE",
            Need::Optional,
            has(CAP_SYS_RESOURCE),
            if has(CAP_SYS_RESOURCE) {
                "held"
            } else {
                "not held: fine on Linux >= 5.11; older kernels need it to raise RLIMIT_MEMLOCK"
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_used_features_never_fail() {
        let absent = finding("kprobes", Need::NotUsed, false, "x");
        assert!(!absent.fails());
        assert!(absent.to_string().contains("not used by podtrace"));
        assert!(finding("BTF", Need::Required, false, "x").fails());
        assert!(!finding("CAP_SYS_RESOURCE", Need::Optional, false, "x").fails());
    }

    #[test]
    fn capability_bits() {
        let findings = capabilities(1 << CAP_BPF | 1 << CAP_PERFMON, true);
        assert!(findings[0].present);
        assert!(!findings[1].present && findings[1].fails());
        let findings = capabilities(1 << CAP_SYS_ADMIN | 1 << CAP_SYS_PTRACE, false);
        assert!(findings.iter().take(2).all(|f| f.present));
    }

    #[test]
    fn cap_sys_admin_is_asked_for_only_where_uprobes_are_perf_events() {
        let caps = 1 << CAP_BPF | 1 << CAP_PERFMON | 1 << CAP_SYS_PTRACE;
        let sys_admin = |multi_links| {
            capabilities(caps, multi_links)
                .into_iter()
                .find(|f| f.feature == "CAP_SYS_ADMIN")
                .map(|f| f.detail)
                .unwrap_or_default()
        };
        assert!(sys_admin(true).contains("not needed here"));
        assert!(sys_admin(false).contains("require it"));
    }
}
