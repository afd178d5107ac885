//! Process lifecycle programs: follow target processes and their descendants.
//!
//! Raw tracepoint arguments are the tracepoints' `TP_PROTO` parameters
//! (include/trace/events/sched.h, v6.18):
//! - `sched_process_fork(struct task_struct *parent, struct task_struct *child)`,
//!   fired in the parent after the child is created, for threads too;
//! - `sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)`,
//!   fired in the new image after comm is set;
//! - `sched_process_exit(struct task_struct *p, ...)`, fired in every exiting
//!   thread after `signal->live` was decremented and `exit_code` set
//!   (kernel/exit.c `do_exit`).
//!
//! Every program first asks whether the current process is a target and
//! returns at once if not; only `exec` also checks the new comm against the
//! target names, since that is how a new target appears.

use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_comm},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use tracer_common::{
    config::{COMM_BYTES, KernelOffsets, TargetInfo, TargetReason},
    drop_reason::DropReason,
    event::{
        CniExecEvent, EXEC_ARGS_TRUNCATED, EXEC_FILENAME_TRUNCATED, EventKind, ExecEvent,
        ExitEvent, FILENAME_BYTES, ForkEvent,
    },
};

use crate::{
    kernel_read::{
        ENV_STRING_BYTES, Space, Task, binprm_filename, env_value, read_str, read_user_args,
    },
    maps::{
        ACTIVE_CALLS, EVENTS, SCRATCH, SCRATCH_BYTES, TARGET_COMMS, TARGETS, config, count_drop,
        set_does_io, submit_flags, target_of,
    },
    record::{Ids, header, now_ns},
};

#[raw_tracepoint(tracepoint = "sched_process_fork")]
fn sched_process_fork(ctx: RawTracePointContext) -> u32 {
    if let Err(reason) = try_fork(&ctx) {
        count_drop(reason);
    }
    0
}

#[raw_tracepoint(tracepoint = "sched_process_exec")]
fn sched_process_exec(ctx: RawTracePointContext) -> u32 {
    if let Err(reason) = try_exec(&ctx) {
        count_drop(reason);
    }
    0
}

#[raw_tracepoint(tracepoint = "sched_process_exit")]
fn sched_process_exit(_ctx: RawTracePointContext) -> u32 {
    if let Err(reason) = try_exit() {
        count_drop(reason);
    }
    0
}

#[inline(always)]
fn current_comm() -> [u8; COMM_BYTES] {
    bpf_get_current_comm().unwrap_or_else(|_| {
        count_drop(DropReason::ReadFailed);
        [0; COMM_BYTES]
    })
}

#[inline(always)]
fn cgroup_id() -> u64 {
    // SAFETY: helper without pointer arguments.
    unsafe { bpf_get_current_cgroup_id() }
}

fn try_fork(ctx: &RawTracePointContext) -> Result<(), DropReason> {
    let parent_ids = Ids::current();
    let (parent_tgid, parent_tid) = (parent_ids.tgid, parent_ids.tid);
    let Some(parent) = target_of(parent_tgid) else {
        return Ok(());
    };
    let ts_ns = now_ns();
    let offsets = config().offsets;
    let child = Task::from_raw(ctx.arg::<u64>(1));
    let child_tgid = child.tgid(&offsets).map_err(|_| DropReason::ReadFailed)?;
    if child_tgid == parent_tgid {
        // A new thread of the same process: nothing new to follow.
        return Ok(());
    }
    let child_tid = child.pid(&offsets).map_err(|_| DropReason::ReadFailed)?;
    let depth = u32::from(parent.depth) + 1;
    if depth > config().max_descendant_depth {
        return Err(DropReason::DescendantDepthLimit);
    }
    let info = set_target(child_tgid, depth as u8, TargetReason::Descendant, 0)?;
    // The tgid may have been a component's before: its mark goes.
    set_does_io(child_tgid, Some(info));

    let mut entry = EVENTS
        .reserve::<ForkEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    entry.write(ForkEvent {
        header: header(
            EventKind::Fork,
            ts_ns,
            Ids {
                tgid: child_tgid,
                tid: child_tid,
            },
        ),
        cgroup_id: cgroup_id(),
        parent_tgid,
        parent_tid,
        depth: depth as u8,
        _pad: [0; 7],
        comm: current_comm(),
    });
    entry.submit(submit_flags(size_of::<ForkEvent>()));
    Ok(())
}

fn try_exec(ctx: &RawTracePointContext) -> Result<(), DropReason> {
    let ids = Ids::current();
    let tgid = ids.tgid;
    let config = config();
    if tgid == config.agent_tgid {
        return Ok(());
    }
    let ts_ns = now_ns();
    let comm = current_comm();
    // SAFETY: the value is copied out at once; no reference is kept.
    let named_flags = unsafe { TARGET_COMMS.get(comm) }.copied();
    let info = match (named_flags, target_of(tgid)) {
        // A target binary: (re)start counting descendants from here, so that
        // e.g. `runc init` under a deep shim is followed like a fresh runc.
        (Some(flags), _) => set_target(tgid, 0, TargetReason::Named, flags)?,
        // A target became another program (runc init exec'ing the container's
        // first process): still followed, but as a descendant, so that its
        // sockets and files are not captured like a component's.
        (None, Some(info)) if info.depth == 0 => set_target(tgid, 1, TargetReason::Descendant, 0)?,
        (None, Some(info)) => info,
        (None, None) => return Ok(()),
    };
    set_does_io(tgid, Some(info));

    let mut entry = EVENTS
        .reserve::<ExecEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points to a ring buffer reservation of
    // size_of::<ExecEvent>() bytes that only this program owns until submit.
    // Every field is assigned below; the filename and args arrays are valid up
    // to the lengths written, which is all user space reads.
    unsafe {
        (*event).header = header(EventKind::Exec, ts_ns, ids);
        (*event).cgroup_id = cgroup_id();
        (*event).target_reason = info.reason;
        (*event).depth = info.depth;
        (*event)._pad = 0;
        (*event).comm = comm;
        let task = Task::current();
        (*event).ppid = task.parent_tgid(&config.offsets).unwrap_or_else(|_| {
            count_drop(DropReason::ReadFailed);
            0
        });
        let mut flags = 0;
        let (filename_len, filename_cut) = read_filename(
            &raw mut (*event).filename,
            ctx.arg::<u64>(2),
            &config.offsets,
        );
        if filename_cut {
            flags |= EXEC_FILENAME_TRUNCATED;
        }
        (*event).filename_len = filename_len;
        let (args_len, args_cut) = read_args(&raw mut (*event).args, task, &config.offsets);
        if args_cut {
            flags |= EXEC_ARGS_TRUNCATED;
        }
        (*event).args_len = args_len;
        (*event).flags = flags;
    }
    entry.submit(submit_flags(size_of::<ExecEvent>()));
    if info.reason == TargetReason::Descendant as u8 {
        cni_container_id(ids, ts_ns, &config.offsets)?;
    }
    Ok(())
}

const _: () = assert!(SCRATCH_BYTES >= ENV_STRING_BYTES);

/// `CNI_CONTAINERID=`, the variable through which a runtime tells a CNI
/// plugin the sandbox it works for, as the two words `env_value` compares.
const CNI_CONTAINER_ID_NAME: [u64; 2] = [
    u64::from_le_bytes(*b"CNI_CONT"),
    u64::from_le_bytes(*b"AINERID="),
];

/// Sends the `CNI_CONTAINERID` of the current process's environment, if it
/// has one: several sandboxes' CNI plugins run at once in a burst of Pod
/// starts, and only this names which sandbox each run is for. Components
/// themselves are not looked at (they are no plugins), nor anything else
/// of an environment sent.
#[inline(always)]
fn cni_container_id(ids: Ids, ts_ns: u64, offsets: &KernelOffsets) -> Result<(), DropReason> {
    let (start, end) = Task::current()
        .env_area(offsets)
        .map_err(|_| DropReason::ReadFailed)?;
    let scratch = SCRATCH.get_ptr_mut(0).ok_or(DropReason::ReadFailed)?;
    let found = env_value(start, end, CNI_CONTAINER_ID_NAME, scratch.cast())
        .map_err(|_| DropReason::ReadFailed)?;
    let Some(value) = found else {
        return Ok(());
    };
    let mut entry = EVENTS
        .reserve::<CniExecEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points to a ring buffer reservation of
    // size_of::<CniExecEvent>() bytes that only this program owns until
    // submit; the id is valid up to `copied`, which is all user space reads.
    unsafe {
        (*event).header = header(EventKind::CniExec, ts_ns, ids);
        (*event)._pad = 0;
        (*event).copied = read_str(Space::User, &raw mut (*event).container_id, value)
            .unwrap_or_else(|_| {
                count_drop(DropReason::ReadFailed);
                0
            }) as u32;
    }
    entry.submit(submit_flags(size_of::<CniExecEvent>()));
    Ok(())
}

/// Stores and returns the target entry of `tgid`.
#[inline(always)]
fn set_target(
    tgid: u32,
    depth: u8,
    reason: TargetReason,
    flags: u8,
) -> Result<TargetInfo, DropReason> {
    let info = TargetInfo {
        depth,
        reason: reason as u8,
        flags,
        _pad: 0,
    };
    TARGETS
        .insert(tgid, info, 0)
        .map_err(|_| DropReason::TargetMapFull)?;
    Ok(info)
}

/// Reads `bprm->filename`; returns (length without NUL, cut short).
#[inline(always)]
fn read_filename(
    dst: *mut [u8; FILENAME_BYTES],
    bprm: u64,
    offsets: &KernelOffsets,
) -> (u16, bool) {
    let copied = binprm_filename(bprm, offsets).and_then(|name| read_str(Space::Kernel, dst, name));
    match copied {
        Ok(0) => (0, false),
        Ok(copied) => {
            let cut = copied >= FILENAME_BYTES;
            if cut {
                count_drop(DropReason::FilenameTruncated);
            }
            ((copied - 1) as u16, cut)
        }
        Err(_) => {
            count_drop(DropReason::ReadFailed);
            (0, false)
        }
    }
}

/// Reads the start of the argv area; returns (bytes read, cut short).
#[inline(always)]
fn read_args(
    dst: *mut [u8; tracer_common::event::ARGS_BYTES],
    task: Task,
    offsets: &KernelOffsets,
) -> (u16, bool) {
    let Ok((start, end)) = task.arg_area(offsets) else {
        count_drop(DropReason::ReadFailed);
        return (0, false);
    };
    let len = end.saturating_sub(start);
    match read_user_args(dst, start, len) {
        Ok(read) => {
            let cut = (read as u64) < len;
            if cut {
                count_drop(DropReason::ArgsTruncated);
            }
            (read as u16, cut)
        }
        Err(_) => {
            count_drop(DropReason::ReadFailed);
            (0, false)
        }
    }
}

fn try_exit() -> Result<(), DropReason> {
    let ids = Ids::current();
    let tgid = ids.tgid;
    if target_of(tgid).is_none() {
        return Ok(());
    }
    // The thread's syscall entry (kept from call to call), and one it left
    // pending if it was killed inside a call.
    let _ = ACTIVE_CALLS.remove((u64::from(tgid) << 32) | u64::from(ids.tid));
    let ts_ns = now_ns();
    let offsets = config().offsets;
    let task = Task::current();
    let live = task
        .live_threads(&offsets)
        .map_err(|_| DropReason::ReadFailed)?;
    if live != 0 {
        // Other threads of the process are still running; report the process
        // once, when its last thread goes.
        return Ok(());
    }
    // The process is gone: stop following its tgid (pids are reused).
    let _ = TARGETS.remove(tgid);
    set_does_io(tgid, None);
    let exit_code = task
        .exit_code(&offsets)
        .map_err(|_| DropReason::ReadFailed)?;
    let mut entry = EVENTS
        .reserve::<ExitEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    entry.write(ExitEvent {
        header: header(EventKind::Exit, ts_ns, ids),
        cgroup_id: cgroup_id(),
        exit_code,
        _pad: 0,
        comm: current_comm(),
    });
    entry.submit(submit_flags(size_of::<ExitEvent>()));
    Ok(())
}
