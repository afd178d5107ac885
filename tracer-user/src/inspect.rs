//! `podtrace inspect` and `podtrace probe-check`: what podtrace finds in a Go
//! binary, and proof that its probes fire there.

use std::fmt::Write as _;

use crate::capture::{
    go_probes::GoInspection,
    uprobes::{ProbeHits, ProbePoint},
};

/// Human-readable report of an inspection.
pub fn render_text(inspection: &GoInspection) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "go version  {}", inspection.go_version);
    if inspection.main.path.is_empty() {
        let _ = writeln!(out, "main        (none recorded: a GOPATH-mode build)");
    } else {
        let _ = writeln!(
            out,
            "main        {} {}",
            inspection.main.path, inspection.main.version
        );
    }
    for module in &inspection.modules {
        let _ = writeln!(out, "module      {} {}", module.path, module.version);
    }
    if let Some(kubernetes) = &inspection.kubernetes {
        let _ = writeln!(out, "kubernetes  {kubernetes}");
    }
    for (name, function) in &inspection.functions {
        let rets: Vec<String> = function
            .ret_offsets
            .iter()
            .map(|ret| format!("+{ret:#x}"))
            .collect();
        let entry_probe = if function.entry_at_stack_check {
            " (stack-check jump)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "function    {name}\n            entry {:#x}  file offset {:#x}  entry probe +{:#x}{entry_probe}  size {}  RETs {}",
            function.entry,
            function.file_offset,
            function.entry_probe_offset,
            function.end.saturating_sub(function.entry),
            if rets.is_empty() {
                "none".to_owned()
            } else {
                rets.join(" ")
            },
        );
        if let Some(source) = inspection.kube_probes.get(name) {
            let _ = writeln!(out, "            offsets {source}");
        }
        if let Some(copy) = function.copy_point {
            let _ = writeln!(
                out,
                "            memmove call +{:#x} (probed instead of the RETs; receiver at RSP+{:#x})",
                copy.offset, copy.spill_area
            );
        }
    }
    for name in &inspection.missing {
        let _ = writeln!(out, "not found   {name}");
    }
    out
}

/// One line per function: entry hits, then RET hits in total and per RET.
pub fn render_hits(hits: &[ProbeHits]) -> String {
    let mut out = String::new();
    let mut functions: Vec<&str> = hits.iter().map(|hit| hit.function.as_str()).collect();
    functions.dedup();
    for function in functions {
        let of_function = || hits.iter().filter(move |hit| hit.function == function);
        let entry: u64 = of_function()
            .filter(|hit| hit.point == ProbePoint::Entry)
            .map(|hit| hit.hits)
            .sum();
        let rets: Vec<(u64, u64)> = of_function()
            .filter_map(|hit| match hit.point {
                ProbePoint::Ret(offset) => Some((offset, hit.hits)),
                ProbePoint::Entry => None,
            })
            .collect();
        let ret_total: u64 = rets.iter().map(|(_, hits)| hits).sum();
        let per_ret: Vec<String> = rets
            .iter()
            .map(|(offset, hits)| format!("+{offset:#x}: {hits}"))
            .collect();
        let _ = writeln!(
            out,
            "{function}  entry: {entry}  returns: {ret_total} ({})",
            per_ret.join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_are_summed_per_function() {
        let hit = |function: &str, point, hits| ProbeHits {
            function: function.into(),
            point,
            hits,
        };
        let text = render_hits(&[
            hit("main.f", ProbePoint::Entry, 5),
            hit("main.f", ProbePoint::Ret(0x10), 3),
            hit("main.f", ProbePoint::Ret(0x20), 2),
        ]);
        assert_eq!(text, "main.f  entry: 5  returns: 5 (+0x10: 3, +0x20: 2)\n");
    }
}
