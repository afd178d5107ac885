//! How long podtrace takes to find its probe points in a Go binary: open it,
//! find every copy of every probed function in pclntab, decode their RETs and
//! entry probe points — against a baseline measured in the same run, reading
//! the whole file once (what any tool that looks at the binary pays).
//!
//! Binaries come from `PODTRACE_BENCH_BINARIES` (colon-separated);
//! `cargo xtask bench` provides Debian's dockerd (75 MB), containerd and etcd.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use tracer_user::capture::go_probes::inspect;

const RUNS: usize = 9;
/// The budget for resolving every probed function of an 80 MB binary.
const BUDGET: Duration = Duration::from_millis(300);

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

fn measure(mut work: impl FnMut()) -> Duration {
    work(); // warm the page cache and allocator
    median(
        (0..RUNS)
            .map(|_| {
                let start = Instant::now();
                work();
                start.elapsed()
            })
            .collect(),
    )
}

fn bench(path: &Path) {
    let size_mb = std::fs::metadata(path)
        .map(|meta| meta.len() as f64 / 1e6)
        .unwrap_or(0.0);
    let inspection = match inspect(path, &[], tracer_gobin::KubeOffsetsMode::default()) {
        Ok(inspection) => inspection,
        Err(err) => {
            println!("{}: cannot inspect: {err}", path.display());
            return;
        }
    };
    let baseline = measure(|| {
        let bytes = std::fs::read(path).unwrap_or_default();
        std::hint::black_box(bytes);
    });
    let resolve = measure(|| {
        std::hint::black_box(inspect(path, &[], tracer_gobin::KubeOffsetsMode::default()).ok());
    });
    println!(
        "{name}: {size_mb:.1} MB, {go}, {functions} probe points found; resolve {resolve:.1?} vs read-file baseline {baseline:.1?}: ratio {ratio:.2} ({verdict} the {BUDGET:?} budget)",
        name = path.display(),
        go = inspection.go_version,
        functions = inspection.functions.len(),
        ratio = resolve.as_secs_f64() / baseline.as_secs_f64(),
        verdict = if resolve < BUDGET { "within" } else { "OVER" },
    );
}

fn main() {
    let binaries: Vec<PathBuf> = std::env::var("PODTRACE_BENCH_BINARIES")
        .unwrap_or_default()
        .split(':')
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
        .collect();
    if binaries.is_empty() {
        println!("no binaries: set PODTRACE_BENCH_BINARIES or run `cargo xtask bench`");
        return;
    }
    for binary in &binaries {
        bench(binary);
    }
}
