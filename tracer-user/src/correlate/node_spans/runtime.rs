//! The runtime's processes under the CRI calls that caused them: runc's
//! create and start, the shim, the containers' first processes and CNI
//! plugin runs, each placed in its Pod once the call that ran it is known.

use crate::correlate::span::SpanKey;

use crate::correlate::contract::{attr, name};

use super::*;

/// A runc execution waiting for its exit.
#[derive(Clone, Debug)]
pub(super) struct RuncRun {
    /// `runc` or the shim's executable name.
    executable: String,
    subcommand: String,
    container_id: String,
    start_ns: u64,
}

/// A finished runc execution whose Pod is not known yet: `runc create` of a
/// workload container ends before containerd's CreateContainer response
/// names the container.
#[derive(Clone, Debug)]
pub(super) struct FinishedRun {
    run: RuncRun,
    pid: u32,
    end_ns: u64,
    status: ExitStatus,
}

/// A process event of a container's first process: its exec (the
/// container started) or its exit.
#[derive(Clone, Debug)]
pub(super) struct ContainerProcess {
    container_id: String,
    pid: u32,
    executable: String,
    ts_ns: u64,
    /// `None` for the exec; the exit status for the exit.
    exit: Option<ExitStatus>,
}

/// A node span whose Pod is not known yet: `runc create` of a workload
/// container ends before containerd's CreateContainer response names the
/// container; the sandbox's runc runs and first exec happen before the
/// RunPodSandbox response names the sandbox.
#[derive(Clone, Debug)]
pub(super) enum Pending {
    Run(FinishedRun),
    Process(ContainerProcess),
    Cni(CniRun),
}

impl Pending {
    fn ts_ns(&self) -> u64 {
        match self {
            Self::Run(run) => run.end_ns,
            Self::Process(process) => process.ts_ns,
            Self::Cni(run) => run.end_ns,
        }
    }
}

/// A CNI plugin execution (containerd runs the plugins of its network
/// configuration for a new sandbox; a plugin may run others, e.g. IPAM).
#[derive(Clone, Debug)]
pub(super) struct CniRun {
    plugin: String,
    pid: u32,
    /// The CNI plugin that ran this one, if any.
    parent_pid: Option<u32>,
    parent_plugin: Option<String>,
    /// See [`CniStart::sandbox_id`].
    sandbox_id: Option<String>,
    start_ns: u64,
    end_ns: u64,
    status: ExitStatus,
}

/// A call that runs CNI plugins, as containerd handled it.
#[derive(Clone, Debug)]
pub(super) struct SandboxWindow {
    method: &'static str,
    sandbox_id: String,
    /// The call's server span: the CNI runs' parent.
    span_id: SpanId,
    start_ns: u64,
    end_ns: u64,
}

/// A CNI plugin execution in progress.
#[derive(Clone, Debug)]
pub(super) struct CniStart {
    plugin: String,
    parent: Option<(u32, String)>,
    start_ns: u64,
    /// The sandbox it works for, from its `CNI_CONTAINERID`.
    sandbox_id: Option<String>,
}

/// How long a finished CNI run waits before it is matched to a
/// RunPodSandbox call (a concurrent call must have finished to be seen).
const CNI_SETTLE_NS: u64 = 1_000_000_000;
/// Sandbox calls remembered for matching CNI runs.
const MAX_SANDBOX_WINDOWS: usize = 1024;

impl NodeSpans {
    /// Remembers when a sandbox call (RunPodSandbox, StopPodSandbox,
    /// RemovePodSandbox) ran, for the CNI runs it may have run; the oldest
    /// is forgotten first.
    pub(super) fn note_sandbox_call(
        &mut self,
        method: &'static str,
        sandbox_id: &str,
        span_id: SpanId,
        (start_ns, end_ns): (u64, u64),
    ) {
        if self.sandbox_windows.len() >= MAX_SANDBOX_WINDOWS {
            self.sandbox_windows.pop_front();
        }
        self.sandbox_windows.push_back(SandboxWindow {
            method,
            sandbox_id: sandbox_id.to_owned(),
            span_id,
            start_ns,
            end_ns,
        });
    }

    /// Notes a runc execution (`runc … create|start … <container id>`), or
    /// a container's first process replacing runc init.
    pub fn on_exec(&mut self, exec: &ExecRecord) -> Vec<Span> {
        if let Some(container_id) = self.container_inits.get(&exec.ids.tgid) {
            // runc create runs `runc init` (an exec of runc itself, argv
            // `runc init`); the next exec is the container's own process.
            if exec.argv.get(1).map(String::as_str) != Some("init") {
                let container_id = container_id.clone();
                self.container_inits.remove(&exec.ids.tgid);
                if self.container_processes.len() < MAX_ENTRIES {
                    self.container_processes
                        .insert(exec.ids.tgid, (container_id.clone(), exec.comm.clone()));
                }
                return self.hold(Pending::Process(ContainerProcess {
                    container_id,
                    pid: exec.ids.tgid,
                    executable: exec.comm.clone(),
                    ts_ns: exec.ids.ts_ns,
                    exit: None,
                }));
            }
            return Vec::new();
        }
        if self.runc_runs.len() >= MAX_ENTRIES || self.cni_runs.len() >= MAX_ENTRIES {
            self.unattributed += 1;
            return Vec::new();
        }
        if exec.filename.contains("/cni/") {
            let parent = self
                .cni_runs
                .get(&exec.ppid)
                .map(|parent| (exec.ppid, parent.plugin.clone()));
            self.cni_runs.insert(
                exec.ids.tgid,
                CniStart {
                    plugin: exec.comm.clone(),
                    parent,
                    start_ns: exec.ids.ts_ns,
                    sandbox_id: None,
                },
            );
            return Vec::new();
        }
        let run = if exec.comm == "runc" {
            // runc [global options] create|start|delete … <container id>,
            // runc [global options] kill [--all] <container id> [signal]
            let at = exec
                .argv
                .iter()
                .position(|arg| matches!(arg.as_str(), "create" | "start" | "delete" | "kill"));
            at.and_then(|at| {
                let subcommand = &exec.argv[at];
                let id = if subcommand == "kill" {
                    exec.argv[at + 1..].iter().find(|arg| !arg.starts_with('-'))
                } else {
                    exec.argv.last()
                };
                Some(subcommand).zip(id)
            })
        } else if exec.comm.starts_with("containerd-shim") {
            // containerd-shim-runc-v2 -namespace … -id <container id> start
            let id = exec
                .argv
                .iter()
                .position(|arg| arg == "-id")
                .and_then(|at| exec.argv.get(at + 1));
            exec.argv.last().filter(|last| *last == "start").zip(id)
        } else {
            None
        };
        if let Some((subcommand, container_id)) = run {
            // The file's name: comm is cut at 15 bytes (`containerd-shim`).
            let executable = exec.filename.rsplit('/').next().unwrap_or(&exec.comm);
            let run = RuncRun {
                executable: executable.to_owned(),
                subcommand: subcommand.clone(),
                container_id: container_id.clone(),
                start_ns: exec.ids.ts_ns,
            };
            self.runc_runs.insert(exec.ids.tgid, run);
        }
        Vec::new()
    }

    /// A CNI plugin that just began was told its sandbox (the exec's
    /// record comes first).
    pub fn on_cni_exec(&mut self, tgid: u32, sandbox_id: String) {
        if let Some(run) = self.cni_runs.get_mut(&tgid) {
            run.sandbox_id = Some(sandbox_id);
        }
    }

    /// Follows `runc create`'s children (runc init and the processes it
    /// clones): one of them becomes the container's first process.
    pub fn on_fork(&mut self, fork: &ForkRecord) {
        let container_id = match self.runc_runs.get(&fork.parent_tgid) {
            Some(run) if run.executable == "runc" && run.subcommand == "create" => {
                Some(run.container_id.clone())
            }
            _ => self.container_inits.get(&fork.parent_tgid).cloned(),
        };
        if let Some(container_id) = container_id {
            if self.container_inits.len() < MAX_ENTRIES {
                self.container_inits.insert(fork.ids.tgid, container_id);
            } else {
                self.unattributed += 1;
            }
        }
    }

    /// A process ended: the span of a runc execution (now, or once the CRI
    /// calls name its container), a child of the call that caused it —
    /// StartContainer for a workload container, RunPodSandbox for the
    /// sandbox's own container — or the exit of a container's first process.
    pub fn on_exit(&mut self, exit: &ExitRecord) -> Vec<Span> {
        self.container_inits.remove(&exit.ids.tgid);
        if let Some((container_id, executable)) = self.container_processes.remove(&exit.ids.tgid) {
            return self.hold(Pending::Process(ContainerProcess {
                container_id,
                pid: exit.ids.tgid,
                executable,
                ts_ns: exit.ids.ts_ns,
                exit: Some(exit.status),
            }));
        }
        if let Some(cni) = self.cni_runs.remove(&exit.ids.tgid) {
            let (parent_pid, parent_plugin) = cni.parent.unzip();
            return self.hold(Pending::Cni(CniRun {
                plugin: cni.plugin,
                pid: exit.ids.tgid,
                parent_pid,
                parent_plugin,
                sandbox_id: cni.sandbox_id,
                start_ns: cni.start_ns,
                end_ns: exit.ids.ts_ns,
                status: exit.status,
            }));
        }
        let Some(run) = self.runc_runs.remove(&exit.ids.tgid) else {
            return Vec::new();
        };
        self.hold(Pending::Run(FinishedRun {
            run,
            pid: exit.ids.tgid,
            end_ns: exit.ids.ts_ns,
            status: exit.status,
        }))
    }

    /// Queues a span for its Pod; returns every queued span whose Pod is known.
    fn hold(&mut self, pending: Pending) -> Vec<Span> {
        let now = pending.ts_ns();
        if self.pending.len() >= MAX_ENTRIES {
            self.unattributed += 1;
        } else {
            self.pending.push(pending);
        }
        self.attribute_pending(now)
    }

    /// Spans of the pending node events whose Pod is now known; those
    /// pending for longer than `PENDING_NS` at `now_ns` are given up and counted.
    pub(super) fn attribute_pending(&mut self, now_ns: u64) -> Vec<Span> {
        let mut pending = std::mem::take(&mut self.pending);
        // CNI plugins that another ran go where that one went: it first.
        pending.sort_by_key(
            |waiting| matches!(waiting, Pending::Cni(run) if run.parent_pid.is_some()),
        );
        let mut spans = Vec::new();
        for waiting in pending {
            let span = match &waiting {
                Pending::Run(run) => self.runc_span(run),
                Pending::Process(process) => self.process_span(process),
                Pending::Cni(run) => match self.cni_span(run, now_ns) {
                    Ok(span) => span,
                    Err(Ambiguous) => {
                        self.unattributed += 1;
                        self.cni_ambiguous += 1;
                        continue;
                    }
                },
            };
            match span {
                Some(span) => spans.push(span),
                None if now_ns.saturating_sub(waiting.ts_ns()) > PENDING_NS => {
                    self.unattributed += 1
                }
                None => self.pending.push(waiting),
            }
        }
        spans
    }

    /// The Pod of a container and the CRI call its runc runs and first
    /// process belong to. containerd (1.6, 1.7) creates a workload's runc
    /// container in StartContainer, not CreateContainer (which only prepares
    /// it): its runc runs are children of StartContainer; the sandbox's own
    /// container is created and started by RunPodSandbox.
    fn container_parent(&self, container_id: &str) -> Option<(&Pod, SpanId)> {
        let (sandbox_id, parent_method) = match self.sandbox_by_container.get(container_id) {
            Some(sandbox_id) => (sandbox_id.as_str(), "StartContainer"),
            None => (container_id, "RunPodSandbox"),
        };
        let pod = self.pods_by_sandbox.get(sandbox_id)?;
        let parent = Self::call_span_id(pod.trace, Side::Server, parent_method, container_id);
        Some((pod, parent))
    }

    fn process_span(&self, process: &ContainerProcess) -> Option<Span> {
        let (pod, parent) = self.container_parent(&process.container_id)?;
        let mut attributes = vec![
            (
                attr::PROCESS_PID.to_owned(),
                AttributeValue::Int(i64::from(process.pid)),
            ),
            string_attribute(attr::PROCESS_EXECUTABLE_NAME, &process.executable),
            string_attribute(attr::CONTAINER_ID, &process.container_id),
        ];
        if let Some(image) = self.container_images.get(&process.container_id) {
            attributes.extend(container_attributes(image));
        }
        let (name, role, status) = match process.exit {
            None => (
                name::container_start(&process.executable),
                "exec",
                SpanStatus::Unset,
            ),
            Some(status) => {
                let (code, status) = exit_status(status);
                attributes.push((
                    attr::PROCESS_EXIT_CODE.to_owned(),
                    AttributeValue::Int(code),
                ));
                (name::container_exit(&process.executable), "exit", status)
            }
        };
        attributes.extend(self.pod_attributes(pod));
        let ts = self.clock.unix_ns(process.ts_ns);
        Some(Span {
            trace_id: pod.trace,
            span_id: SpanId::of(
                pod.trace,
                &SpanKey::ContainerProcess {
                    event: role,
                    container_id: &process.container_id,
                    pid: process.pid,
                },
            ),
            parent_span_id: Some(parent),
            name,
            kind: SpanKind::Internal,
            start_unix_ns: ts,
            end_unix_ns: ts,
            attributes,
            status,
            links: Vec::new(),
        })
    }

    /// The span of a CNI plugin run, under the RunPodSandbox (ADD),
    /// StopPodSandbox or RemovePodSandbox (DEL) call that ran it: the call
    /// for the sandbox its `CNI_CONTAINERID` names that it ran inside.
    /// Without that value (a runtime that does not set it, a recording made
    /// before podtrace read it) the run is matched to the only such call
    /// containerd was handling while it ran — once concurrent calls have had
    /// time to finish — and is counted unattributed when two were.
    fn cni_span(&mut self, run: &CniRun, now_ns: u64) -> Result<Option<Span>, Ambiguous> {
        if run.sandbox_id.is_none() && now_ns.saturating_sub(run.end_ns) < CNI_SETTLE_NS {
            return Ok(None);
        }
        let window = match run.parent_pid {
            // A plugin another ran goes where that one went, once it has:
            // its own shorter run may fit one call where its parent's
            // fits two, and it must not hang from a span that is not sent.
            Some(parent) => match self.cni_calls.get(&parent) {
                Some((call, _)) => call.clone()?,
                None => return Ok(None),
            },
            None => {
                let mut windows = self.sandbox_windows.iter().filter(|w| {
                    w.start_ns <= run.start_ns
                        && run.end_ns <= w.end_ns
                        && run.sandbox_id.as_ref().is_none_or(|id| *id == w.sandbox_id)
                });
                let call = match (windows.next(), windows.next()) {
                    (None, _) => return Ok(None),
                    (Some(window), None) => Ok(window.clone()),
                    (Some(_), Some(_)) => Err(Ambiguous),
                };
                self.cni_calls
                    .retain(|_, (_, end)| run.end_ns.saturating_sub(*end) <= PENDING_NS);
                self.cni_calls.insert(run.pid, (call.clone(), run.end_ns));
                call?
            }
        };
        let sandbox_id = &window.sandbox_id;
        let Some(pod) = self.pods_by_sandbox.get(sandbox_id) else {
            return Ok(None);
        };
        let parent = match (&run.parent_plugin, run.parent_pid) {
            (Some(plugin), Some(pid)) => SpanId::of(pod.trace, &SpanKey::Cni { plugin, pid }),
            _ => window.span_id,
        };
        let (code, status) = exit_status(run.status);
        let mut attributes = vec![
            (
                attr::PROCESS_PID.to_owned(),
                AttributeValue::Int(i64::from(run.pid)),
            ),
            string_attribute(attr::PROCESS_EXECUTABLE_NAME, &run.plugin),
            (
                attr::PROCESS_EXIT_CODE.to_owned(),
                AttributeValue::Int(code),
            ),
            string_attribute(attr::CRI_SANDBOX_ID, sandbox_id),
            // ADD for RunPodSandbox, DEL for the teardown calls: which
            // trace of the Pod the run belongs to.
            string_attribute(attr::CNI_CALL, window.method),
            string_attribute(
                attr::ATTRIBUTION,
                if run.sandbox_id.is_some() {
                    "CNI_CONTAINERID: the sandbox the runtime named"
                } else {
                    "time: the only sandbox call in progress"
                },
            ),
        ];
        attributes.extend(self.pod_attributes(pod));
        Ok(Some(Span {
            trace_id: pod.trace,
            span_id: SpanId::of(
                pod.trace,
                &SpanKey::Cni {
                    plugin: &run.plugin,
                    pid: run.pid,
                },
            ),
            parent_span_id: Some(parent),
            name: name::cni(&run.plugin),
            kind: SpanKind::Internal,
            start_unix_ns: self.clock.unix_ns(run.start_ns),
            end_unix_ns: self.clock.unix_ns(run.end_ns),
            attributes,
            status,
            links: Vec::new(),
        }))
    }

    fn runc_span(&self, finished: &FinishedRun) -> Option<Span> {
        let run = &finished.run;
        let (pod, mut parent) = self.container_parent(&run.container_id)?;
        if !matches!(run.subcommand.as_str(), "create" | "start") {
            // delete and kill come with stopping and removing, later: under
            // the node span, not the call that started the container.
            parent = self.node_span_id(pod.trace);
        }
        let mut attributes = vec![
            (
                attr::PROCESS_PID.to_owned(),
                AttributeValue::Int(i64::from(finished.pid)),
            ),
            string_attribute(attr::PROCESS_EXECUTABLE_NAME, &run.executable),
            string_attribute(attr::CONTAINER_ID, &run.container_id),
        ];
        let (code, status) = exit_status(finished.status);
        attributes.push((
            attr::PROCESS_EXIT_CODE.to_owned(),
            AttributeValue::Int(code),
        ));
        attributes.extend(self.pod_attributes(pod));
        Some(Span {
            trace_id: pod.trace,
            span_id: SpanId::of(
                pod.trace,
                &SpanKey::Runtime {
                    executable: &run.executable,
                    subcommand: &run.subcommand,
                    container_id: &run.container_id,
                    pid: finished.pid,
                },
            ),
            parent_span_id: Some(parent),
            name: name::runtime(&run.executable, &run.subcommand),
            kind: SpanKind::Internal,
            start_unix_ns: self.clock.unix_ns(run.start_ns),
            end_unix_ns: self.clock.unix_ns(finished.end_ns),
            attributes,
            status,
            links: Vec::new(),
        })
    }
}

/// A CNI run overlapped more than one RunPodSandbox call.
#[derive(Clone, Debug)]
pub(super) struct Ambiguous;

/// `process.exit.code` (128 + signal when killed, as shells report it) and
/// the span status of an exit.
fn exit_status(status: ExitStatus) -> (i64, SpanStatus) {
    match status {
        ExitStatus::Code(0) => (0, SpanStatus::Unset),
        ExitStatus::Code(code) => (
            i64::from(code),
            SpanStatus::Error(format!("exit code {code}")),
        ),
        ExitStatus::Signal(signal) => (
            128 + i64::from(signal),
            SpanStatus::Error(format!("killed by signal {signal}")),
        ),
    }
}
