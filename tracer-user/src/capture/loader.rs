//! Open → configure → load → attach → seed: the lifecycle of the eBPF object.
//!
//! [`Probes::load`] computes kernel offsets from BTF, loads the embedded object
//! with the configuration as a read-only global, writes the target names,
//! attaches the lifecycle programs, and only then seeds the target map from
//! /proc, so that a target started during start-up is seen by one or the
//! other. Dropping [`Probes`] detaches every program.

use std::{collections::HashMap, net::SocketAddr, os::unix::fs::MetadataExt as _, path::Path};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap as BpfHashMap, MapData, MapError, PerCpuArray, ProgramArray, RingBuf},
    programs::{ProgramError, RawTracePoint},
};
use tracer_common::{
    config::{
        COMM_BYTES, Config, ETCD_EXECUTABLE, MAX_WAKEUP_BYTES, TARGET_TLS_CALLS_DETACHED,
        TARGET_WAL, TargetInfo, WAKEUP_FRACTION,
    },
    drop_reason::DropReason,
    event::{EventHeader, EventKind, FILENAME_BYTES},
    gofunc::{GO_FUNC_DISABLED, GoFuncSpec, GoFunction, MAX_GO_FUNC_PROBES},
    io::{
        AF_INET, AF_INET6, AF_UNIX, ConnEvent, DATA_BYTES_MAX, FdInfo, FdKey, FdKind,
        FileOpenEvent, GO_TLS_COPY_SPILL_SHIFT, GO_TLS_READ_ARGS_AT_RET, GO_TLS_SECRET_LEVEL_ARG,
        GoTlsOffsets, HeaderSide, IoSyscall, MAX_GO_BINARIES, UNIX_PATH_BYTES, USER_CONN_ID_BIT,
    },
    names::{
        GLOBAL_CONFIG, LIFECYCLE_PROGRAMS, MAP_DROPS, MAP_EVENTS, MAP_FDS, MAP_GO_BINARIES,
        MAP_GO_FUNCS, MAP_IO_PROCESSES, MAP_SYSCALL_PROGRAMS, MAP_TARGET_COMMS, MAP_TARGETS,
        PROGRAM_GO_FUNC, PROGRAM_GO_HPACK_FIELD, PROGRAM_GO_TLS_READ, PROGRAM_GO_TLS_READ_COPY,
        PROGRAM_GO_TLS_READ_RET, PROGRAM_GO_TLS_SECRET, PROGRAM_GO_TLS_WRITE, PROGRAM_SYS_ENTER,
        PROGRAM_SYS_EXIT,
    },
};

use tracer_gobin::GoBinError;

use super::{
    clock::monotonic_now_ns,
    control::{self, CaptureControl, MutedConns},
    go_probes::{ARGS_AT_RET_CHECKED, NoGoPlan, ResolvedFunction, go_plan},
    hpack_probes::HpackProbes,
    io_processes::{self, PID_MAX_FILE},
    kernel_btf::{KernelBtfError, VMLINUX_BTF, kernel_offsets},
    kube_probes::{self, ApiserverProbes},
    on_demand::{FileId, OnDemandProbes},
    proc_fds::{OpenFd, open_fds},
    recording::KnownProcesses,
    targets::{FoundTarget, TargetMatcher, etcd_member_name, scan_proc},
    uprobe_links::{self, UprobeAttacher, UprobeLinks},
    wal_head::wal_head_record,
    wire::{Peer, record_bytes, split_args},
};

/// `BPF_NOEXIST` map update flag (include/uapi/linux/bpf.h): insert only if absent.
const BPF_NOEXIST: u64 = 1;

/// The eBPF object built by build.rs (empty when built with AYA_BUILD_SKIP=1).
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-ebpf"));

/// What the kernel side is asked to do.
#[derive(Clone, Debug)]
pub struct CaptureOptions {
    /// Which executables are targets.
    pub targets: TargetMatcher,
    /// Generations of descendants followed below a target.
    pub max_descendant_depth: u32,
    /// Size of the ring buffer: a power of two, multiple of the page size.
    pub ring_buffer_bytes: u32,
    /// Payload bytes copied per socket or file syscall (at most `DATA_BYTES_MAX`).
    pub data_bytes: u32,
    /// Attach the Go probes as one perf event each even where the kernel
    /// has uprobe multi links (as on kernels before 6.6).
    pub uprobe_perf_events: bool,
    /// Where the Kubernetes function probes' offsets come from.
    pub kube_offsets: tracer_gobin::KubeOffsetsMode,
    /// Which of kube-apiserver's functions are probed.
    pub apiserver_probes: ApiserverProbes,
}

/// Failure to set up capture. Each variant says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Built without the eBPF object.
    #[error(
        "this podtrace was built with AYA_BUILD_SKIP=1 and has no eBPF object; rebuild after `cargo xtask setup`"
    )]
    NoObject,
    /// Kernel struct offsets unavailable.
    #[error(transparent)]
    KernelBtf(#[from] KernelBtfError),
    /// The kernel refused the object (the verifier log is in the error).
    #[error("loading the eBPF object failed (run `podtrace check`): {0}")]
    Load(#[from] aya::EbpfError),
    /// A map the agent needs is missing from the object: agent and object do not match.
    #[error("the eBPF object has no map {0}")]
    MissingMap(&'static str),
    /// A syscall program is missing from the object.
    #[error("the eBPF object has no syscall program {0}")]
    MissingSyscallProgram(String),
    /// Loading or attaching a syscall program failed.
    #[error("program {name}: {source}")]
    SyscallProgram {
        /// Program name.
        name: String,
        /// Why (with the verifier log for load failures).
        source: ProgramError,
    },
    /// A program the agent needs is missing from the object.
    #[error("the eBPF object has no program {0} of the expected type")]
    MissingProgram(&'static str),
    /// A map operation failed.
    #[error("map {name}: {source}")]
    Map {
        /// Map name.
        name: &'static str,
        /// Why.
        source: MapError,
    },
    /// Loading or attaching a program failed.
    #[error("program {name}: {source}")]
    Program {
        /// Program name.
        name: &'static str,
        /// Why (with the verifier log for load failures).
        source: ProgramError,
    },
    /// Loading a uprobe program for multi links, or creating a link, failed.
    #[error("uprobe program {name}: {source}")]
    UprobeLink {
        /// Program name.
        name: &'static str,
        /// Why (with the verifier log for load failures).
        source: std::io::Error,
    },
    /// More uprobe attachments than `PROBE_HITS` has slots.
    #[error("more than {0} uprobe attachments")]
    TooManyProbes(u32),
    /// Mapping a map's memory failed.
    #[error("mapping the memory of map {name}: {source}")]
    MapMemory {
        /// Map name.
        name: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The ring buffer size is not usable.
    #[error("ring buffer size {0} must be a power of two and at least 4096")]
    RingBufferSize(u32),
    /// The executable of a process could not be read (it exited).
    #[error("the executable of process {tgid}: {source}")]
    ProcessGone {
        /// The process.
        tgid: u32,
        /// Why.
        source: std::io::Error,
    },
}

/// Loaded and attached programs. Dropping it detaches them.
#[derive(Debug)]
pub struct Probes {
    ebpf: Ebpf,
    seeded: Vec<FoundTarget>,
    /// Sockets and files open at start, with the ids given to them.
    open_fds: Vec<(OpenFd, u64)>,
    /// Go executables looked at for probes, by (device, inode), with their
    /// slot in `GO_BINARIES` if they got TLS probes.
    go_binaries: HashMap<(u64, u64), Option<u32>>,
    /// Where Kubernetes function probes take their offsets from.
    kube_offsets_mode: tracer_gobin::KubeOffsetsMode,
    /// Which of kube-apiserver's functions are probed.
    apiserver_probes: ApiserverProbes,
    /// Slots of `GO_FUNCS` in use.
    go_func_slots: u32,
    /// The executable and spec of each `GO_FUNCS` slot, to stop a function's
    /// probes ([`CaptureControl::DisableFunction`]).
    go_func_specs: Vec<(FileId, GoFuncSpec)>,
    /// How the Go uprobes attach.
    uprobes: UprobeAttacher,
    /// The Go probes of each executable but the HPACK ones.
    go_links: Vec<UprobeLinks>,
    /// The HPACK probes, attached while a process needs them.
    hpack: HpackProbes,
    /// The per-call TLS probes (`crypto/tls.(*Conn)` Write and Read),
    /// attached while a process has a TLS connection whose plaintext comes
    /// from them (older than podtrace and not keyed yet, or not TLS 1.3).
    tls_calls: OnDemandProbes,
    /// Connections whose bytes the programs no longer copy.
    muted: MutedConns,
}

impl Drop for Probes {
    fn drop(&mut self) {
        let started = std::time::Instant::now();
        let links = uprobe_links::close_all(
            self.go_links
                .drain(..)
                .chain(self.hpack.probes.take_links())
                .chain(self.tls_calls.take_links()),
        );
        tracing::info!(
            links,
            ms = started.elapsed().as_millis() as u64,
            "Go probe links detached"
        );
    }
}

/// What attaching the Go probes to one binary did.
#[derive(Debug)]
struct GoAttached {
    /// Uprobes attached.
    attachments: usize,
    /// The binary's `GO_BINARIES` slot, if it got TLS probes.
    tls_index: Option<u32>,
    /// Why it got no TLS probes although it uses crypto/tls.
    unknown_release: Option<String>,
    /// Kubernetes function probes attached.
    kube_functions: usize,
    /// Why a Kubernetes component got no function probes.
    no_kube_probes: Option<String>,
    /// Where its Kubernetes offsets came from.
    kube_source: Option<tracer_gobin::KubeOffsetsSource>,
    /// Kubernetes functions not probed, each with why.
    kube_refused: Vec<(&'static str, String)>,
}

/// Why a Go binary got no probes.
#[derive(Debug, thiserror::Error)]
pub enum GoAttachError {
    /// Nothing to attach, or the binary cannot be read.
    #[error(transparent)]
    Plan(#[from] NoGoPlan),
    /// Loading maps or attaching failed.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// `GO_BINARIES` is full.
    #[error("more than {MAX_GO_BINARIES} Go binaries with TLS probes")]
    TooManyBinaries,
    /// `GO_FUNCS` is full.
    #[error("more than {MAX_GO_FUNC_PROBES} Kubernetes function probe attachments")]
    TooManyFunctionProbes,
    /// A `crypto/tls.Conn` field offset over 65535 (the table has none near).
    #[error("crypto/tls.Conn field offset {0} does not fit the probes' 16 bits")]
    OffsetTooLarge(u64),
}

impl Probes {
    /// Loads, attaches, and seeds targets from /proc.
    pub fn load(options: &CaptureOptions) -> Result<Self, CaptureError> {
        let size = options.ring_buffer_bytes;
        if !size.is_power_of_two() || size < 4096 {
            return Err(CaptureError::RingBufferSize(size));
        }
        let config = Config {
            offsets: kernel_offsets(Path::new(VMLINUX_BTF))?,
            max_descendant_depth: options.max_descendant_depth,
            agent_tgid: std::process::id(),
            data_bytes: options.data_bytes.min(DATA_BYTES_MAX as u32),
            wakeup_bytes: (size / WAKEUP_FRACTION).min(MAX_WAKEUP_BYTES),
        };
        let io_entries = io_processes::entries(Path::new(PID_MAX_FILE));
        let mut ebpf = load_object(
            EbpfLoader::new()
                .override_global(GLOBAL_CONFIG, &config, true)
                .map_max_entries(MAP_EVENTS, size)
                .map_max_entries(MAP_IO_PROCESSES, io_entries),
        )?;

        let mut comms: BpfHashMap<_, [u8; COMM_BYTES], u8> = map_mut(&mut ebpf, MAP_TARGET_COMMS)?;
        for (key, flags) in options.targets.comm_keys() {
            comms
                .insert(key, flags, 0)
                .map_err(|source| CaptureError::Map {
                    name: MAP_TARGET_COMMS,
                    source,
                })?;
        }

        for spec in LIFECYCLE_PROGRAMS {
            attach_raw_tracepoint(&mut ebpf, spec.program, spec.tracepoint)?;
        }

        // The per-syscall programs go into SYSCALL_PROGRAMS before the two
        // raw tracepoints that call them attach.
        let mut slots = Vec::with_capacity(2 * IoSyscall::ALL.len());
        for syscall in IoSyscall::ALL {
            for (slot, program_name) in [
                (
                    syscall.enter_slot(),
                    format!("sys_enter_{}", syscall.name()),
                ),
                (syscall.exit_slot(), format!("sys_exit_{}", syscall.name())),
            ] {
                let program: &mut RawTracePoint = ebpf
                    .program_mut(&program_name)
                    .and_then(|program| program.try_into().ok())
                    .ok_or_else(|| CaptureError::MissingSyscallProgram(program_name.clone()))?;
                let wrap = |source| CaptureError::SyscallProgram {
                    name: program_name.clone(),
                    source,
                };
                program.load().map_err(wrap)?;
                let fd = program
                    .fd()
                    .and_then(|fd| fd.try_clone().map_err(Into::into));
                slots.push((slot, fd.map_err(wrap)?));
            }
        }
        let name = MAP_SYSCALL_PROGRAMS;
        let map = ebpf.map_mut(name).ok_or(CaptureError::MissingMap(name))?;
        let mut programs =
            ProgramArray::try_from(map).map_err(|source| CaptureError::Map { name, source })?;
        for (slot, fd) in &slots {
            programs
                .set(*slot, fd, 0)
                .map_err(|source| CaptureError::Map { name, source })?;
        }
        // Each attaches to the raw tracepoint of its own name.
        for name in [PROGRAM_SYS_ENTER, PROGRAM_SYS_EXIT] {
            attach_raw_tracepoint(&mut ebpf, name, name)?;
        }

        let uprobes = UprobeAttacher::load(
            &mut ebpf,
            EBPF_OBJECT,
            !options.uprobe_perf_events,
            &[
                PROGRAM_GO_TLS_WRITE,
                PROGRAM_GO_TLS_READ,
                PROGRAM_GO_TLS_READ_RET,
                PROGRAM_GO_TLS_READ_COPY,
                PROGRAM_GO_TLS_SECRET,
                PROGRAM_GO_HPACK_FIELD,
                PROGRAM_GO_FUNC,
            ],
        )?;

        let seeded = scan_proc(
            Path::new("/proc"),
            &options.targets,
            options.max_descendant_depth,
            std::process::id(),
        );
        let mut targets: BpfHashMap<_, u32, TargetInfo> = map_mut(&mut ebpf, MAP_TARGETS)?;
        for found in &seeded {
            // BPF_NOEXIST: a process the kernel side already picked up keeps its entry.
            match targets.insert(found.tgid, found.info(), BPF_NOEXIST) {
                Ok(()) => {}
                Err(MapError::SyscallError(err))
                    if err.io_error.raw_os_error() == Some(libc::EEXIST) => {}
                Err(source) => {
                    return Err(CaptureError::Map {
                        name: MAP_TARGETS,
                        source,
                    });
                }
            }
        }
        // Components: their I/O is followed, and they get Go probes.
        let components: Vec<u32> = seeded
            .iter()
            .filter(|target| target.info().does_io())
            .map(|target| target.tgid)
            .collect();
        io_processes::mark(&ebpf, io_entries, &components)?;
        let open_fds = seed_open_fds(&mut ebpf, &seeded)?;
        let mut probes = Self {
            ebpf,
            seeded,
            open_fds,
            go_binaries: HashMap::new(),
            kube_offsets_mode: options.kube_offsets,
            apiserver_probes: options.apiserver_probes,
            go_func_slots: 0,
            go_func_specs: Vec::new(),
            uprobes,
            go_links: Vec::new(),
            hpack: HpackProbes::default(),
            tls_calls: OnDemandProbes::new("per-call TLS probes"),
            muted: MutedConns::default(),
        };
        for tgid in components {
            probes.attach_go_probes_at(tgid, true);
        }
        // Executables of the target names on PATH get their probes now, so a
        // short-lived client's first TLS write is not lost to attach latency.
        for exe in options.targets.executables_on_path() {
            probes.attach_go_probes_path(&exe);
        }
        Ok(probes)
    }

    /// Attaches the Go probes (TLS plaintext, HPACK header fields) to the
    /// executable of process `tgid`, once per executable file. What happened
    /// is logged; nothing here stops the agent (a component that is not Go,
    /// or whose Go release podtrace has no offsets for, is still followed at
    /// the syscall level).
    pub fn attach_go_probes(&mut self, tgid: u32) {
        if self.io_unfollowed(tgid) {
            return;
        }
        self.attach_go_probes_at(tgid, false);
    }

    /// Whether process `tgid`'s I/O is not followed (runc, a shim: a few a
    /// second in a Pod start burst), or it is gone already: either way its
    /// executable is not read. The kernel's entry is the one truth about
    /// what the process is.
    fn io_unfollowed(&self, tgid: u32) -> bool {
        let Some(map) = self.ebpf.map(MAP_TARGETS) else {
            return false;
        };
        let Ok(targets) = BpfHashMap::<_, u32, TargetInfo>::try_from(map) else {
            return false;
        };
        targets
            .get(&tgid, 0)
            .map_or(true, |target| !target.does_io())
    }

    /// `at_start`: the process was running before podtrace.
    fn attach_go_probes_at(&mut self, tgid: u32, at_start: bool) {
        self.attach_go_probes_for(
            Path::new(&format!("/proc/{tgid}/exe")),
            Some((tgid, at_start)),
        );
    }

    /// Attaches the Go probes to the executable at `exe` (see
    /// [`Self::attach_go_probes`]).
    pub fn attach_go_probes_path(&mut self, exe: &Path) {
        self.attach_go_probes_for(exe, None);
    }

    fn attach_go_probes_for(&mut self, exe: &Path, process: Option<(u32, bool)>) {
        let Ok(meta) = std::fs::metadata(exe) else {
            return; // gone already
        };
        let file = (meta.dev(), meta.ino());
        if self.go_binaries.contains_key(&file) {
            if let Some((tgid, at_start)) = process {
                self.hpack.probes.add_process(file, tgid, at_start);
                self.tls_calls.add_process(file, tgid, at_start);
            }
            return;
        }
        let running: Vec<u32> = process
            .filter(|(_, at_start)| *at_start)
            .map(|(tgid, _)| tgid)
            .into_iter()
            .collect();
        let outcome = self.attach_go_probes_to(exe, file, &running);
        if let Some((tgid, _)) = process {
            self.hpack.probes.add_process(file, tgid, false);
            self.tls_calls.add_process(file, tgid, false);
        }
        let exe_path = exe;
        let exe = exe.display();
        let tls_index = match outcome {
            Ok(GoAttached {
                attachments,
                tls_index,
                unknown_release,
                kube_functions,
                no_kube_probes,
                kube_source,
                kube_refused,
            }) => {
                // `kube_offsets` is left out of the line when there is none.
                let kube_offsets = kube_source.as_ref().map(tracing::field::display);
                tracing::info!(%exe, attachments, tls = tls_index.is_some(), kube_functions, kube_offsets, "Go probes attached");
                for (function, why) in kube_refused {
                    tracing::warn!(%exe, function, %why, "Kubernetes function not probed: its span will be missing");
                }
                if let Some(error) = unknown_release {
                    tracing::warn!(%exe, %error, "no TLS plaintext from this executable (HTTP/2 headers and syscalls are still captured)");
                }
                if let Some(error) = no_kube_probes {
                    tracing::warn!(%exe, %error, "no apiserver/scheduler/kubelet function spans from this executable (its REST, etcd and CRI spans still work)");
                }
                tls_index
            }
            Err(GoAttachError::Plan(
                NoGoPlan::NothingToProbe | NoGoPlan::Binary(GoBinError::NotGo),
            )) => {
                tracing::debug!(%exe, "no Go probes: not a Go binary, or no crypto/tls or HTTP/2");
                None
            }
            Err(_) if std::fs::metadata(exe_path).is_err() => {
                // The process exited while its executable was being read or
                // probed (a test's cluster torn down beside another's, a
                // component restarting): nothing is known of the file, and
                // its next process is tried afresh — remembering the failure
                // left every later kube-apiserver of that file unprobed.
                tracing::debug!(%exe, "its process exited while the Go probes were being attached");
                return;
            }
            Err(error) => {
                tracing::warn!(%exe, %error, "no Go probes on this executable (its syscalls are still captured)");
                None
            }
        };
        self.go_binaries.insert(file, tls_index);
    }

    fn attach_go_probes_to(
        &mut self,
        exe: &Path,
        file: FileId,
        running: &[u32],
    ) -> Result<GoAttached, GoAttachError> {
        let plan = go_plan(exe, self.kube_offsets_mode, self.apiserver_probes)?;
        let mut points: Vec<(&'static str, u64, u64)> = Vec::new();
        let mut hpack_points = Vec::new();
        for (functions, side) in [
            (&plan.hpack_encoders, HeaderSide::Encoder),
            (&plan.hpack_decoders, HeaderSide::Decoder),
        ] {
            for function in functions {
                let (offset, bits) = function.entry_probe();
                hpack_points.push((PROGRAM_GO_HPACK_FIELD, offset, side as u64 | bits));
            }
        }
        let mut tls_call_points = Vec::new();
        let (tls_index, unknown_release) = match &plan.offsets {
            Ok(offsets) if !plan.tls_writes.is_empty() || !plan.tls_reads.is_empty() => {
                let index = self.register_tls_offsets(offsets)?;
                let cookie = u64::from(index);
                for write in &plan.tls_writes {
                    let (offset, bits) = write.entry_probe();
                    tls_call_points.push((PROGRAM_GO_TLS_WRITE, offset, cookie | bits));
                }
                for read in &plan.tls_reads {
                    tls_call_points.extend(tls_read_points(read, cookie));
                }
                let level = if plan.tls_secret_level_arg {
                    GO_TLS_SECRET_LEVEL_ARG
                } else {
                    0
                };
                for setter in &plan.tls_secret_setters {
                    let (offset, bits) = setter.entry_probe();
                    points.push((PROGRAM_GO_TLS_SECRET, offset, cookie | level | bits));
                }
                (Some(index), None)
            }
            Ok(_) => (None, None),
            Err(error) => (
                None,
                (!plan.tls_writes.is_empty()).then(|| error.to_string()),
            ),
        };
        let mut kube_refused = Vec::new();
        let (kube_functions, no_kube_probes) = match &plan.kube_offsets {
            Some(Ok(kube)) => match &plan.offsets {
                Ok(go) => {
                    let before = points.len();
                    for (probe, function) in &plan.kube_functions {
                        if let Some(why) = kube_probes::refusal(probe, kube) {
                            kube_refused.push((probe.symbol, why));
                            continue;
                        }
                        let entry = self.register_function_probe(
                            file,
                            kube_probes::spec(probe, false, go, kube),
                        )?;
                        let (offset, bits) = function.entry_probe();
                        points.push((PROGRAM_GO_FUNC, offset, u64::from(entry) | bits));
                        if probe.returns {
                            let ret = self.register_function_probe(
                                file,
                                kube_probes::spec(probe, true, go, kube),
                            )?;
                            points.extend(function.ret_offsets.iter().map(|offset| {
                                (
                                    PROGRAM_GO_FUNC,
                                    function.file_offset + offset,
                                    u64::from(ret),
                                )
                            }));
                        }
                    }
                    (points.len() - before, None)
                }
                Err(error) => (0, Some(error.to_string())),
            },
            Some(Err(error)) => (0, Some(error.to_string())),
            None => (0, None),
        };
        let kube_source = match &plan.kube_offsets {
            Some(Ok(kube)) => Some(kube.source.clone()),
            _ => None,
        };
        if !points.is_empty() {
            let links = self.uprobes.attach(&mut self.ebpf, exe, &points)?;
            self.go_links.push(links);
        }
        let on_demand = hpack_points.len() + tls_call_points.len();
        self.hpack.probes.add_executable(
            &mut self.ebpf,
            &self.uprobes,
            file,
            exe.to_path_buf(),
            hpack_points,
            running,
        )?;
        self.tls_calls.add_executable(
            &mut self.ebpf,
            &self.uprobes,
            file,
            exe.to_path_buf(),
            tls_call_points,
            running,
        )?;
        Ok(GoAttached {
            attachments: points.len() + on_demand,
            tls_index,
            unknown_release,
            kube_functions,
            no_kube_probes,
            kube_source,
            kube_refused,
        })
    }

    /// Carries out what the decode stage asked. A failure is logged: the
    /// fields keep coming from the probes, a muted connection's bytes keep
    /// coming (and the decode stage drops them).
    pub fn control(&mut self, requests: &[CaptureControl]) {
        for request in requests {
            let done = match *request {
                CaptureControl::Hpack(hpack) => {
                    self.hpack.control(&mut self.ebpf, &self.uprobes, hpack)
                }
                CaptureControl::Mute(conn) => self.muted.set(&mut self.ebpf, conn, true),
                CaptureControl::Unmute(conn) => self.muted.set(&mut self.ebpf, conn, false),
                CaptureControl::TlsProbes { tgid, needed } => self.set_tls_calls(tgid, needed),
                CaptureControl::Rekey {
                    conn,
                    fd,
                    direction,
                } => control::clear_keyed(&mut self.ebpf, conn, fd, direction).map(|cleared| {
                    if cleared {
                        tracing::debug!(?conn, fd, ?direction, "TLS secret to be read again");
                    }
                }),
                CaptureControl::Exited(tgid) => self
                    .hpack
                    .exited(&mut self.ebpf, &self.uprobes, tgid)
                    .and_then(|()| self.tls_calls.exited(&mut self.ebpf, &self.uprobes, tgid)),
                CaptureControl::DisableFunction { tgid, function } => {
                    self.disable_function(tgid, function)
                }
            };
            if let Err(error) = done {
                // Probes of a process that exited meanwhile (its
                // /proc/PID/exe is gone, at a cluster's teardown): nothing
                // is lost, its exit record follows.
                let gone = request
                    .process()
                    .filter(|tgid| !Path::new(&format!("/proc/{tgid}")).exists());
                match gone {
                    Some(tgid) => {
                        tracing::debug!(%error, tgid, "capture control: the process exited")
                    }
                    None => tracing::warn!(%error, ?request, "capture control failed"),
                }
            }
        }
    }

    /// Attaches or detaches the per-call TLS probes of process `tgid`'s
    /// executable as it needs them, and tells the syscall programs of each
    /// of its processes: while they are detached, the ciphertext of a TLS
    /// socket not keyed is copied too, so that the decode stage sees a
    /// connection idle until now start to talk, and asks for them again.
    fn set_tls_calls(&mut self, tgid: u32, needed: bool) -> Result<(), CaptureError> {
        if !self
            .tls_calls
            .set_needed(&mut self.ebpf, &self.uprobes, tgid, needed)?
        {
            return Ok(());
        }
        let (processes, attached) = self.tls_calls.processes_of(tgid);
        let name = MAP_TARGETS;
        let mut targets: BpfHashMap<_, u32, TargetInfo> = map_mut(&mut self.ebpf, name)?;
        for process in processes {
            // A process that ended has no entry: nothing to mark.
            let Ok(mut target) = targets.get(&process, 0) else {
                continue;
            };
            if attached {
                target.flags &= !TARGET_TLS_CALLS_DETACHED;
            } else {
                target.flags |= TARGET_TLS_CALLS_DETACHED;
            }
            targets
                .insert(process, target, 0)
                .map_err(|source| CaptureError::Map { name, source })?;
        }
        Ok(())
    }

    /// Connections muted now, since start, and mutes refused because the
    /// map was full.
    pub fn muted_connections(&self) -> (usize, u64, u64) {
        (self.muted.len(), self.muted.total, self.muted.refused)
    }

    /// Executables whose HPACK probes are attached now, and how many times
    /// one was attached again after a detach.
    pub fn hpack_probes_attached(&self) -> (usize, u64) {
        (self.hpack.probes.attached(), self.hpack.probes.reattached)
    }

    /// Executables whose per-call TLS probes are attached now, and how many
    /// times one was attached again after a detach.
    pub fn tls_call_probes_attached(&self) -> (usize, u64) {
        (self.tls_calls.attached(), self.tls_calls.reattached)
    }

    /// Stores a function probe's spec in the next `GO_FUNCS` slot; the slot
    /// is the attach cookie of its attachments.
    fn register_function_probe(
        &mut self,
        file: FileId,
        spec: GoFuncSpec,
    ) -> Result<u32, GoAttachError> {
        let slot = self.go_func_slots;
        if slot >= MAX_GO_FUNC_PROBES {
            return Err(GoAttachError::TooManyFunctionProbes);
        }
        array_set(&mut self.ebpf, MAP_GO_FUNCS, slot, spec)?;
        self.go_func_slots += 1;
        self.go_func_specs.push((file, spec));
        Ok(slot)
    }

    /// Stops every probe of `function` in the executable of process `tgid`:
    /// its spec says `GO_FUNC_DISABLED`, and the program returns before it
    /// copies anything. (The uprobes stay: they share one link per
    /// executable with the function probes that read well.)
    fn disable_function(&mut self, tgid: u32, function: GoFunction) -> Result<(), CaptureError> {
        let meta = std::fs::metadata(format!("/proc/{tgid}/exe"))
            .map_err(|source| CaptureError::ProcessGone { tgid, source })?;
        let file = (meta.dev(), meta.ino());
        let slots: Vec<(u32, GoFuncSpec)> = (0u32..)
            .zip(&self.go_func_specs)
            .filter(|(_, (of, spec))| *of == file && spec.function == function as u16)
            .map(|(slot, (_, spec))| (slot, *spec))
            .collect();
        for (slot, mut spec) in slots {
            spec.flags |= GO_FUNC_DISABLED;
            array_set(&mut self.ebpf, MAP_GO_FUNCS, slot, spec)?;
            if let Some(entry) = self.go_func_specs.get_mut(slot as usize) {
                entry.1 = spec;
            }
        }
        Ok(())
    }

    /// Stores a binary's struct offsets in the next `GO_BINARIES` slot.
    fn register_tls_offsets(
        &mut self,
        offsets: &tracer_gobin::StructOffsets,
    ) -> Result<u32, GoAttachError> {
        let index = self
            .go_binaries
            .values()
            .filter(|slot| slot.is_some())
            .count() as u32;
        if index >= MAX_GO_BINARIES {
            return Err(GoAttachError::TooManyBinaries);
        }
        // The crypto/tls.Conn offsets are a few hundred bytes (see the
        // generated table); one that did not fit would read the wrong field.
        let small =
            |offset: u64| u16::try_from(offset).map_err(|_| GoAttachError::OffsetTooLarge(offset));
        let value = GoTlsOffsets {
            tls_conn_conn: offsets.tls_conn_conn as u32,
            tcp_conn_fd: offsets.tcp_conn_fd as u32,
            net_fd_sysfd: offsets.net_fd_sysfd as u32,
            tls_conn_vers: small(offsets.tls_conn_vers)?,
            tls_conn_cipher_suite: small(offsets.tls_conn_cipher_suite)?,
            tls_conn_in_seq: small(offsets.tls_conn_in_seq)?,
            tls_conn_in_secret: small(offsets.tls_conn_in_secret)?,
            tls_conn_out_seq: small(offsets.tls_conn_out_seq)?,
            tls_conn_out_secret: small(offsets.tls_conn_out_secret)?,
            tls_conn_input_s: small(offsets.tls_conn_input_s)?,
            tls_conn_input_i: small(offsets.tls_conn_input_i)?,
            tls_conn_raw_input_buf: small(offsets.tls_conn_raw_input_buf)?,
            tls_conn_raw_input_off: small(offsets.tls_conn_raw_input_off)?,
            tls_conn_in: small(offsets.tls_conn_in)?,
            tls_conn_out: small(offsets.tls_conn_out)?,
            _pad: 0,
        };
        array_set(&mut self.ebpf, MAP_GO_BINARIES, index, value)?;
        Ok(index)
    }

    /// Records, in the kernel's wire format, of what was already open at
    /// start (connections found in /proc, WAL files), stamped with the current
    /// time: the pipeline sees them before any kernel record about them, and
    /// `podtrace record` stores them like the rest.
    ///
    /// A WAL segment's open record is followed by the record of its first
    /// bytes ([`wal_head_record`]).
    pub fn initial_records(&self) -> Vec<Vec<u8>> {
        let ts_ns = monotonic_now_ns();
        self.open_fds
            .iter()
            .flat_map(|(open, conn_id)| {
                let head = (open.kind == FdKind::WalFile)
                    .then(|| wal_head_record(open.tgid, open.fd, *conn_id, ts_ns))
                    .flatten();
                [Some(Self::initial_record(open, *conn_id, ts_ns)), head]
            })
            .flatten()
            .collect()
    }

    /// The record of one fd open at start: a WAL segment's open, or a
    /// connection's.
    fn initial_record(open: &OpenFd, conn_id: u64, ts_ns: u64) -> Vec<u8> {
        let header = |kind: EventKind| EventHeader {
            ts_ns,
            kind: kind as u32,
            tgid: open.tgid,
            tid: open.tgid,
            _pad: 0,
        };
        match &open.path {
            Some(path) => {
                let mut event = FileOpenEvent {
                    header: header(EventKind::FileOpen),
                    conn_id,
                    fd: open.fd,
                    path_len: 0,
                    fd_kind: open.kind as u8,
                    _pad: 0,
                    path: [0; FILENAME_BYTES],
                };
                let len = path.len().min(FILENAME_BYTES - 1);
                event.path[..len].copy_from_slice(&path.as_bytes()[..len]);
                event.path_len = len as u16;
                record_bytes(&event)
            }
            None => {
                let mut event = ConnEvent {
                    header: header(EventKind::Conn),
                    conn_id,
                    ret: 0,
                    fd: open.fd,
                    family: 0,
                    port: 0,
                    action: open.action as u8,
                    fd_kind: open.kind as u8,
                    unix_path_len: 0,
                    _pad: 0,
                    local_port: open.local_port.unwrap_or(0),
                    _pad2: [0; 2],
                    addr: [0; 16],
                    unix_path: [0; UNIX_PATH_BYTES],
                    _tail: [0; 4],
                };
                set_peer(&mut event, &open.peer);
                record_bytes(&event)
            }
        }
    }

    /// What podtrace knows of the targets found at start: their names, by
    /// tgid (from their executables), and the etcd members' names
    /// ([`etcd_member_name`], from their command lines).
    pub fn known_processes(&self) -> KnownProcesses {
        let names = self
            .seeded
            .iter()
            .filter_map(|target| {
                let name = target.exe.as_ref()?.file_name()?.to_str()?.to_owned();
                Some((target.tgid, name))
            })
            .collect::<Vec<_>>();
        let etcd_members = names
            .iter()
            .filter(|(_, name)| name == ETCD_EXECUTABLE)
            .filter_map(|(tgid, _)| {
                // Gone since the scan, or not readable: no name, as for a
                // member whose flags do not give one.
                let cmdline = std::fs::read(format!("/proc/{tgid}/cmdline")).ok()?;
                Some((*tgid, etcd_member_name(&split_args(&cmdline), false)?))
            })
            .collect();
        KnownProcesses {
            names,
            etcd_members,
        }
    }

    /// The targets found in /proc at start.
    pub fn seeded(&self) -> &[FoundTarget] {
        &self.seeded
    }

    /// Takes the ring buffer for the reader task (once).
    pub fn take_ring_buffer(&mut self) -> Result<RingBuf<MapData>, CaptureError> {
        let map = self
            .ebpf
            .take_map(MAP_EVENTS)
            .ok_or(CaptureError::MissingMap(MAP_EVENTS))?;
        RingBuf::try_from(map).map_err(|source| CaptureError::Map {
            name: MAP_EVENTS,
            source,
        })
    }

    /// Current kernel-side drop counters, summed over CPUs.
    pub fn drop_counts(&self) -> Result<DropCounts, CaptureError> {
        let map = self
            .ebpf
            .map(MAP_DROPS)
            .ok_or(CaptureError::MissingMap(MAP_DROPS))?;
        let drops: PerCpuArray<_, u64> =
            PerCpuArray::try_from(map).map_err(|source| CaptureError::Map {
                name: MAP_DROPS,
                source,
            })?;
        let mut counts = DropCounts::default();
        for reason in DropReason::ALL {
            let per_cpu = drops
                .get(&(reason as u32), 0)
                .map_err(|source| CaptureError::Map {
                    name: MAP_DROPS,
                    source,
                })?;
            counts.by_reason[reason as usize] = per_cpu.iter().sum();
        }
        Ok(counts)
    }
}

/// The probes that deliver one copy of `crypto/tls.(*Conn).Read`'s plaintext,
/// cheapest first: one on its call to `runtime.memmove` (emulated CALL; `c`
/// from its spill slot); else RET probes that read `c` and `b` from the spill
/// slots; else an entry probe that remembers them and RET probes.
fn tls_read_points(read: &ResolvedFunction, cookie: u64) -> Vec<(&'static str, u64, u64)> {
    if let Some(copy) = read.copy_point {
        let spill = copy.spill_area << GO_TLS_COPY_SPILL_SHIFT;
        return vec![(
            PROGRAM_GO_TLS_READ_COPY,
            read.file_offset + copy.offset,
            cookie | spill,
        )];
    }
    let mut points = Vec::new();
    let ret_cookie = if read.args_at_ret >= ARGS_AT_RET_CHECKED {
        cookie | GO_TLS_READ_ARGS_AT_RET
    } else {
        let (offset, bits) = read.entry_probe();
        points.push((PROGRAM_GO_TLS_READ, offset, cookie | bits));
        cookie
    };
    points.extend(
        read.ret_offsets
            .iter()
            .map(|ret| (PROGRAM_GO_TLS_READ_RET, read.file_offset + ret, ret_cookie)),
    );
    points
}

/// Writes `peer` into a connection record's address fields.
fn set_peer(event: &mut ConnEvent, peer: &Peer) {
    match peer {
        Peer::Tcp(SocketAddr::V4(addr)) => {
            event.family = AF_INET;
            event.port = addr.port();
            event.addr[..4].copy_from_slice(&addr.ip().octets());
        }
        Peer::Tcp(SocketAddr::V6(addr)) => {
            event.family = AF_INET6;
            event.port = addr.port();
            event.addr = addr.ip().octets();
        }
        Peer::Unix(path) => {
            event.family = AF_UNIX;
            // An abstract name shown as `@name` is stored with its leading NUL.
            let bytes: Vec<u8> = match path.strip_prefix('@') {
                Some(name) => std::iter::once(0).chain(name.bytes()).collect(),
                None => path.bytes().collect(),
            };
            let len = bytes.len().min(UNIX_PATH_BYTES);
            event.unix_path[..len].copy_from_slice(&bytes[..len]);
            event.unix_path_len = len as u8;
        }
        Peer::Unknown => {}
    }
}

/// Puts the sockets (and, for etcd, WAL files) that the targets found at start
/// already have open into `FDS`, with user-space ids (`USER_CONN_ID_BIT`).
fn seed_open_fds(
    ebpf: &mut Ebpf,
    targets: &[FoundTarget],
) -> Result<Vec<(OpenFd, u64)>, CaptureError> {
    let mut fds: BpfHashMap<_, FdKey, FdInfo> = map_mut(ebpf, MAP_FDS)?;
    let mut seeded = Vec::new();
    // Only the components themselves: their descendants' (containers')
    // traffic is not captured, nor runc's and the shims'.
    for target in targets.iter().filter(|target| target.info().does_io()) {
        for open in open_fds(
            Path::new("/proc"),
            target.tgid,
            target.flags & TARGET_WAL != 0,
        ) {
            let conn_id = USER_CONN_ID_BIT | seeded.len() as u64;
            let info = FdInfo {
                conn_id,
                kind: open.kind as u8,
                flags: 0,
                _pad: [0; 6],
            };
            let key = FdKey {
                tgid: open.tgid,
                fd: open.fd,
            };
            match fds.insert(key, info, BPF_NOEXIST) {
                Ok(()) => seeded.push((open, conn_id)),
                // The kernel saw it connect or accept in the meantime.
                Err(MapError::SyscallError(err))
                    if err.io_error.raw_os_error() == Some(libc::EEXIST) => {}
                Err(source) => {
                    return Err(CaptureError::Map {
                        name: MAP_FDS,
                        source,
                    });
                }
            }
        }
    }
    Ok(seeded)
}

/// Loads the embedded object with `loader`; programs are loaded and attached
/// by the caller, so only the ones it uses reach the verifier.
pub(crate) fn load_object(loader: &mut EbpfLoader<'_>) -> Result<Ebpf, CaptureError> {
    if EBPF_OBJECT.is_empty() {
        return Err(CaptureError::NoObject);
    }
    raise_memlock_limit();
    Ok(loader.load(EBPF_OBJECT)?)
}

/// Kernel-side drop counters by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    by_reason: [u64; DropReason::COUNT as usize],
}

impl DropCounts {
    /// The count of one reason.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.by_reason[reason as usize]
    }

    /// Every reason with its count.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .into_iter()
            .map(|reason| (reason, self.get(reason)))
    }
}

pub(super) fn map_mut<'a, K: aya::Pod, V: aya::Pod>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<BpfHashMap<&'a mut MapData, K, V>, CaptureError> {
    let map = ebpf.map_mut(name).ok_or(CaptureError::MissingMap(name))?;
    BpfHashMap::try_from(map).map_err(|source| CaptureError::Map { name, source })
}

/// Loads the raw tracepoint program `name` and attaches it to `tracepoint`.
fn attach_raw_tracepoint(
    ebpf: &mut Ebpf,
    name: &'static str,
    tracepoint: &str,
) -> Result<(), CaptureError> {
    let program: &mut RawTracePoint = ebpf
        .program_mut(name)
        .and_then(|program| program.try_into().ok())
        .ok_or(CaptureError::MissingProgram(name))?;
    let wrap = |source| CaptureError::Program { name, source };
    program.load().map_err(wrap)?;
    program.attach(tracepoint).map_err(wrap)?;
    Ok(())
}

/// Sets slot `index` of the array map `name`.
fn array_set<V: aya::Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
    index: u32,
    value: V,
) -> Result<(), CaptureError> {
    let map_error = |source| CaptureError::Map { name, source };
    let map = ebpf.map_mut(name).ok_or(CaptureError::MissingMap(name))?;
    let mut array: Array<_, V> = Array::try_from(map).map_err(map_error)?;
    array.set(index, value, 0).map_err(map_error)
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK. Raising it may be
/// refused (no CAP_SYS_RESOURCE); on newer kernels that is harmless.
fn raise_memlock_limit() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass and nothing else.
    let ret = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
    if ret != 0 {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "could not raise RLIMIT_MEMLOCK; fine on kernels >= 5.11, which charge BPF memory to the cgroup"
        );
    }
}
