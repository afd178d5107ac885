//! Attaching the Go uprobes: one BPF link per program and executable
//! (`BPF_TRACE_UPROBE_MULTI`, Linux 6.6) where the kernel has them, one perf
//! event per offset where it does not.
//!
//! Why links: closing a perf-event uprobe waits for an RCU grace period
//! while holding the kernel's global `event_mutex` (~0.1 s each on Linux
//! 6.18), so the agent's ~150 attachments on a control plane took ~17 s to
//! detach at stop, and each switch of the HPACK probes stalled the capture
//! thread for as many waits as the executable has probe points. A multi
//! link unregisters all of its offsets and then waits once (~45 ms here),
//! and links closed from several threads share their waits: a control
//! plane's 16 links detach in ~0.1 s.
//!
//! aya 0.14 loads uprobe programs without the expected attach type a multi
//! link requires, so for links these programs are loaded here:
//! from the same object, relocated against the maps aya created (the agent's
//! configuration in `.rodata` included), through `BPF_PROG_LOAD` with
//! `expected_attach_type = BPF_TRACE_UPROBE_MULTI`. aya loads them only for
//! the fallback, so that each program reaches the verifier once.

use std::{
    collections::{HashMap, HashSet},
    ffi::{CStr, CString},
    io,
    os::{
        fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
};

use aya::{
    Ebpf,
    maps::{Map, MapData},
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope},
    },
};
use aya_obj::generated::{
    BPF_ALU64, BPF_EXIT, BPF_JMP, BPF_K, BPF_MOV, bpf_attach_type::BPF_TRACE_UPROBE_MULTI,
    bpf_attr, bpf_cmd, bpf_insn, bpf_prog_type::BPF_PROG_TYPE_KPROBE,
};

use super::CaptureError;

/// Bytes of verifier log asked for when a load fails.
const VERIFIER_LOG_BYTES: usize = 1 << 20;

/// Attaches uprobes of a set of programs of one loaded object.
#[derive(Debug)]
pub(crate) struct UprobeAttacher {
    /// The programs loaded for multi links, by name; `None` on a kernel
    /// without them.
    multi: Option<HashMap<&'static str, OwnedFd>>,
}

/// What one [`UprobeAttacher::attach`] attached. Multi links detach when
/// dropped; perf-event attachments belong to aya's program and detach with
/// [`UprobeAttacher::detach`] or when the object is dropped.
#[derive(Debug)]
pub(crate) enum UprobeLinks {
    /// One link per program.
    Multi(Vec<OwnedFd>),
    /// One perf event per offset.
    Perf(Vec<(&'static str, UProbeLinkId)>),
}

impl UprobeAttacher {
    /// Loads the programs `names` of `ebpf` (their maps created by aya,
    /// `object` the bytes aya loaded): if `multi_links`, for multi links
    /// where the kernel has them, and through aya otherwise.
    pub(crate) fn load(
        ebpf: &mut Ebpf,
        object: &[u8],
        multi_links: bool,
        names: &[&'static str],
    ) -> Result<Self, CaptureError> {
        let multi = match multi_links.then(|| load_multi(ebpf, object, names)) {
            None => None,
            Some(Ok(programs)) => Some(programs),
            Some(Err(MultiUnavailable::Kernel(error))) => {
                tracing::info!(%error, "no uprobe multi links on this kernel (Linux 6.6+): one perf event per Go probe, which detach more slowly");
                None
            }
            Some(Err(MultiUnavailable::Load(error))) => {
                tracing::warn!(%error, "the Go probes' programs did not load for uprobe multi links: one perf event per Go probe, which detach more slowly");
                None
            }
        };
        if multi.is_none() {
            for &name in names {
                program_mut(ebpf, name)?
                    .load()
                    .map_err(|source| CaptureError::Program { name, source })?;
            }
        }
        Ok(Self { multi })
    }

    /// Attaches each (program, file offset, cookie) of `points` to the
    /// executable at `path`, for every process running it.
    pub(crate) fn attach(
        &self,
        ebpf: &mut Ebpf,
        path: &Path,
        points: &[(&'static str, u64, u64)],
    ) -> Result<UprobeLinks, CaptureError> {
        let Some(programs) = &self.multi else {
            let mut links = Vec::with_capacity(points.len());
            for &(name, offset, cookie) in points {
                let point = UProbeAttachPoint {
                    location: UProbeAttachLocation::AbsoluteOffset(offset),
                    cookie: Some(cookie),
                };
                let link = program_mut(ebpf, name)?
                    .attach(point, path, UProbeScope::AllProcesses)
                    .map_err(|source| CaptureError::Program { name, source })?;
                links.push((name, link));
            }
            return Ok(UprobeLinks::Perf(links));
        };
        let mut by_program: Vec<(&'static str, Vec<u64>, Vec<u64>)> = Vec::new();
        for &(name, offset, cookie) in points {
            match by_program.iter_mut().find(|(program, ..)| *program == name) {
                Some((_, offsets, cookies)) => {
                    offsets.push(offset);
                    cookies.push(cookie);
                }
                None => by_program.push((name, vec![offset], vec![cookie])),
            }
        }
        let path =
            CString::new(path.as_os_str().as_bytes()).map_err(|_| CaptureError::UprobeLink {
                name: "(path)",
                source: io::Error::new(io::ErrorKind::InvalidInput, "path with a NUL byte"),
            })?;
        let mut links = Vec::with_capacity(by_program.len());
        for (name, offsets, cookies) in by_program {
            let program = programs
                .get(name)
                .ok_or(CaptureError::MissingProgram(name))?;
            let link = link_create(program.as_fd().as_raw_fd(), &path, &offsets, &cookies)
                .map_err(|source| CaptureError::UprobeLink { name, source })?;
            links.push(link);
        }
        Ok(UprobeLinks::Multi(links))
    }

    /// Detaches `links`.
    pub(crate) fn detach(ebpf: &mut Ebpf, links: UprobeLinks) -> Result<(), CaptureError> {
        match links {
            UprobeLinks::Multi(links) => drop(links),
            UprobeLinks::Perf(links) => {
                for (name, link) in links {
                    program_mut(ebpf, name)?
                        .detach(link)
                        .map_err(|source| CaptureError::Program { name, source })?;
                }
            }
        }
        Ok(())
    }
}

/// Detaches `links` at stop: multi links from a thread each, so that their
/// grace periods overlap (one after another, each waits its own); perf
/// events stay for aya, which detaches them when the object is dropped.
/// Returns how many links it closed.
pub(crate) fn close_all(links: impl IntoIterator<Item = UprobeLinks>) -> usize {
    let fds: Vec<OwnedFd> = links
        .into_iter()
        .flat_map(|links| match links {
            UprobeLinks::Multi(fds) => fds,
            UprobeLinks::Perf(_) => Vec::new(),
        })
        .collect();
    let count = fds.len();
    std::thread::scope(|scope| {
        for fd in fds {
            scope.spawn(move || drop(fd));
        }
    });
    count
}

fn program_mut<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut UProbe, CaptureError> {
    ebpf.program_mut(name)
        .and_then(|program| program.try_into().ok())
        .ok_or(CaptureError::MissingProgram(name))
}

/// Why the programs got no multi-link versions.
enum MultiUnavailable {
    /// The kernel has no uprobe multi links: fall back.
    Kernel(io::Error),
    /// The object or a program failed to load: not expected of a kernel
    /// that has the links, but the perf events still work.
    Load(CaptureError),
}

fn load_multi(
    ebpf: &Ebpf,
    object: &[u8],
    names: &[&'static str],
) -> Result<HashMap<&'static str, OwnedFd>, MultiUnavailable> {
    let object_error = |error: String| {
        MultiUnavailable::Load(CaptureError::UprobeLink {
            name: "(object)",
            source: io::Error::other(error),
        })
    };
    let mut obj = aya_obj::Object::parse(object).map_err(|e| object_error(e.to_string()))?;
    // Programs that pass a callback to bpf_loop need their BTF (func_info);
    // fixed up and sanitized for this kernel as aya does for its own loads.
    let btf = match aya::features().btf() {
        Some(features) => obj
            .fixup_and_sanitize_btf(features)
            .map_err(|e| object_error(e.to_string()))?
            .map(|btf| btf_load(&btf.to_bytes()))
            .transpose()
            .map_err(|e| object_error(format!("BTF: {e}")))?,
        None => None,
    };
    // Each map of the object, with the fd of the one aya created for it.
    let maps = std::mem::take(&mut obj.maps);
    let mut created = Vec::with_capacity(maps.len());
    for (name, map) in &maps {
        let data = ebpf
            .map(name)
            .and_then(map_data)
            .ok_or_else(|| object_error(format!("map {name} not created, or of another type")))?;
        created.push((name.as_str(), data.fd().as_fd().as_raw_fd(), map));
    }
    let text_sections: HashSet<usize> = obj.functions.keys().map(|(section, _)| *section).collect();
    obj.relocate_maps(created.into_iter(), &text_sections)
        .map_err(|e| object_error(e.to_string()))?;
    obj.relocate_calls(&text_sections)
        .map_err(|e| object_error(e.to_string()))?;
    let mut programs = HashMap::new();
    for &name in names {
        let function = obj
            .programs
            .get(name)
            .and_then(|program| obj.functions.get(&program.function_key()))
            .ok_or(MultiUnavailable::Load(CaptureError::MissingProgram(name)))?;
        let fd = prog_load(
            name,
            &function.instructions,
            btf.as_ref().map(|btf| (btf, function)),
            &obj.license,
        )
        .map_err(|source| MultiUnavailable::Load(CaptureError::UprobeLink { name, source }))?;
        programs.insert(name, fd);
    }
    if let Some(program) = programs.values().next() {
        probe_multi_links(program).map_err(MultiUnavailable::Kernel)?;
    }
    Ok(programs)
}

/// Whether this kernel has uprobe multi links (for `podtrace check`).
pub(crate) fn kernel_has_multi_links() -> io::Result<()> {
    // r0 = 0; exit.
    // SAFETY: bpf_insn is plain data; all-zero is registers 0, offset and
    // immediate 0.
    let mut instructions: [bpf_insn; 2] = unsafe { std::mem::zeroed() };
    instructions[0].code = (BPF_ALU64 | BPF_MOV | BPF_K) as u8;
    instructions[1].code = (BPF_JMP | BPF_EXIT) as u8;
    let program = prog_load("podtrace_probe", &instructions, None, c"GPL")?;
    probe_multi_links(&program)
}

/// As libbpf probes it: a link of `program` (loaded for multi links) on a
/// directory fails with EBADF where the kernel has uprobe multi links, with
/// EINVAL where it does not know the attach type.
fn probe_multi_links(program: &OwnedFd) -> io::Result<()> {
    match link_create(program.as_raw_fd(), c"/", &[0], &[0]) {
        Err(error) if error.raw_os_error() == Some(libc::EBADF) => Ok(()),
        Err(error) => Err(error),
        Ok(_) => Err(io::Error::other("a uprobe link on / was accepted")),
    }
}

/// The map's fd holder, for the map types the object has.
fn map_data(map: &Map) -> Option<&MapData> {
    match map {
        Map::Array(data)
        | Map::HashMap(data)
        | Map::LruHashMap(data)
        | Map::PerCpuArray(data)
        | Map::PerCpuHashMap(data)
        | Map::ProgramArray(data)
        | Map::RingBuf(data) => Some(data),
        _ => None,
    }
}

/// `BPF_PROG_LOAD` of a kprobe-type program for uprobe multi links; the
/// verifier's log in the error when it refuses.
fn prog_load(
    name: &str,
    instructions: &[bpf_insn],
    btf: Option<(&OwnedFd, &aya_obj::Function)>,
    license: &CStr,
) -> io::Result<OwnedFd> {
    let (func_info, line_info) = btf.map_or_else(Default::default, |(_, function)| {
        (
            function.func_info.func_info_bytes(),
            function.line_info.line_info_bytes(),
        )
    });
    let attempt = |log: Option<&mut [u8]>| {
        // SAFETY: bpf_attr is plain data; all-zero is its valid default.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        // SAFETY: writing the fields of the union's BPF_PROG_LOAD member.
        let load = unsafe { &mut attr.__bindgen_anon_3 };
        load.prog_type = BPF_PROG_TYPE_KPROBE as u32;
        load.expected_attach_type = BPF_TRACE_UPROBE_MULTI as u32;
        load.insns = instructions.as_ptr() as u64;
        load.insn_cnt = instructions.len() as u32;
        load.license = license.as_ptr() as u64;
        if let Some((btf, function)) = btf {
            load.prog_btf_fd = btf.as_raw_fd() as u32;
            if function.func_info_rec_size > 0 {
                load.func_info = func_info.as_ptr() as u64;
                load.func_info_cnt = function.func_info.func_info.len() as u32;
                load.func_info_rec_size = function.func_info_rec_size as u32;
            }
            if function.line_info_rec_size > 0 {
                load.line_info = line_info.as_ptr() as u64;
                load.line_info_cnt = function.line_info.line_info.len() as u32;
                load.line_info_rec_size = function.line_info_rec_size as u32;
            }
        }
        for (to, from) in load.prog_name.iter_mut().zip(name.bytes().take(15)) {
            *to = from as libc::c_char;
        }
        if let Some(log) = log {
            load.log_level = 1;
            load.log_buf = log.as_mut_ptr() as u64;
            load.log_size = log.len() as u32;
        }
        bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr)
    };
    attempt(None).or_else(|error| {
        let mut log = vec![0u8; VERIFIER_LOG_BYTES];
        match attempt(Some(&mut log)) {
            Ok(fd) => Ok(fd),
            Err(_) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                // The refusal is at the log's end.
                let text = String::from_utf8_lossy(&log[..end]);
                let tail: String = text
                    .lines()
                    .rev()
                    .take(12)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                Err(io::Error::new(error.kind(), format!("{error}: {tail}")))
            }
        }
    })
}

/// `BPF_BTF_LOAD` of the object's BTF.
fn btf_load(btf: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: bpf_attr is plain data; all-zero is its valid default.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the fields of the union's BPF_BTF_LOAD member.
    let load = unsafe { &mut attr.__bindgen_anon_7 };
    load.btf = btf.as_ptr() as u64;
    load.btf_size = btf.len() as u32;
    bpf(bpf_cmd::BPF_BTF_LOAD, &mut attr)
}

/// `BPF_LINK_CREATE` of a uprobe multi link of `prog_fd` on `path` at
/// `offsets` (file offsets), for every process.
fn link_create(
    prog_fd: RawFd,
    path: &CStr,
    offsets: &[u64],
    cookies: &[u64],
) -> io::Result<OwnedFd> {
    debug_assert_eq!(offsets.len(), cookies.len());
    // SAFETY: bpf_attr is plain data; all-zero is its valid default.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the fields of the union's BPF_LINK_CREATE member.
    let link = unsafe { &mut attr.link_create };
    link.__bindgen_anon_1.prog_fd = prog_fd as u32;
    link.attach_type = BPF_TRACE_UPROBE_MULTI as u32;
    // SAFETY: as above, the uprobe_multi member of the attach-type union.
    let multi = unsafe { &mut link.__bindgen_anon_3.uprobe_multi };
    multi.path = path.as_ptr() as u64;
    multi.offsets = offsets.as_ptr() as u64;
    multi.cookies = cookies.as_ptr() as u64;
    multi.cnt = offsets.len() as u32;
    bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)
}

/// The bpf(2) system call for a command that returns a new fd.
fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a bpf_attr the size passed; the pointers in it point
    // to buffers that outlive the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            std::ptr::from_mut(attr),
            size_of::<bpf_attr>(),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}
