//! The only module that reads kernel or user memory.
//!
//! Struct layouts are not compiled in: Rust eBPF gets no CO-RE relocations, so
//! every field is read at an offset user space took from the running kernel's
//! BTF (`tracer_common::config::KernelOffsets`). All reads go through
//! `bpf_probe_read_*`, which fail cleanly on a bad pointer instead of faulting.

use aya_ebpf::{
    cty::c_void,
    helpers::{bpf_get_current_task, bpf_probe_read_kernel, generated},
};
use tracer_common::{config::KernelOffsets, event::ARGS_BYTES};

/// A `struct task_struct *`.
#[derive(Clone, Copy)]
pub(crate) struct Task(u64);

impl Task {
    /// The task running the program.
    #[inline(always)]
    pub(crate) fn current() -> Task {
        // SAFETY: helper without arguments; returns the current task pointer.
        Task(unsafe { bpf_get_current_task() })
    }

    /// A task pointer taken from a raw tracepoint argument.
    #[inline(always)]
    pub(crate) fn from_raw(ptr: u64) -> Task {
        Task(ptr)
    }

    #[inline(always)]
    fn field<T: Copy>(self, offset: u32) -> Result<T, i32> {
        read_kernel(self.0, offset)
    }

    /// `task->pid` (thread id).
    #[inline(always)]
    pub(crate) fn pid(self, offsets: &KernelOffsets) -> Result<u32, i32> {
        self.field::<i32>(offsets.task_pid).map(|pid| pid as u32)
    }

    /// `task->tgid` (process id).
    #[inline(always)]
    pub(crate) fn tgid(self, offsets: &KernelOffsets) -> Result<u32, i32> {
        self.field::<i32>(offsets.task_tgid).map(|tgid| tgid as u32)
    }

    /// `task->real_parent->tgid`.
    #[inline(always)]
    pub(crate) fn parent_tgid(self, offsets: &KernelOffsets) -> Result<u32, i32> {
        let parent = Task(self.field::<u64>(offsets.task_real_parent)?);
        parent.tgid(offsets)
    }

    /// `task->exit_code`.
    #[inline(always)]
    pub(crate) fn exit_code(self, offsets: &KernelOffsets) -> Result<u32, i32> {
        self.field::<i32>(offsets.task_exit_code)
            .map(|code| code as u32)
    }

    /// `task->signal->live`: threads of the group that have not yet begun to
    /// exit. Zero in `sched_process_exit` means this is the group's last thread.
    #[inline(always)]
    pub(crate) fn live_threads(self, offsets: &KernelOffsets) -> Result<i32, i32> {
        let signal = self.field::<u64>(offsets.task_signal)?;
        read_kernel::<i32>(signal, offsets.signal_live)
    }

    /// `[task->mm->arg_start, task->mm->arg_end)`: the user-space argv strings.
    #[inline(always)]
    pub(crate) fn arg_area(self, offsets: &KernelOffsets) -> Result<(u64, u64), i32> {
        self.mm_area(offsets, offsets.mm_arg_start, offsets.mm_arg_end)
    }

    /// `[task->mm->env_start, task->mm->env_end)`: the environment strings.
    #[inline(always)]
    pub(crate) fn env_area(self, offsets: &KernelOffsets) -> Result<(u64, u64), i32> {
        self.mm_area(offsets, offsets.mm_env_start, offsets.mm_env_end)
    }

    /// Two addresses of `task->mm`, at offsets `start` and `end`.
    #[inline(always)]
    fn mm_area(self, offsets: &KernelOffsets, start: u32, end: u32) -> Result<(u64, u64), i32> {
        let mm = self.field::<u64>(offsets.task_mm)?;
        if mm == 0 {
            return Err(-1);
        }
        Ok((read_kernel::<u64>(mm, start)?, read_kernel::<u64>(mm, end)?))
    }
}

/// Environment strings looked through for one variable.
const MAX_ENV_STRINGS: u32 = 256;
/// The longest environment string stepped over: past a longer one the next
/// string's start is unknown, and the search ends.
pub(crate) const ENV_STRING_BYTES: usize = 4096;

/// The address of the value of the environment variable whose name and `=`
/// are the 16 bytes `name` (as two little-endian words), in the environment
/// strings `[start, end)` of the current process. Each string is read into
/// `scratch` (a per-CPU map value that no record is made from) to find the
/// next one's start, and the scratch is zeroed before this returns: nothing
/// of the environment is left in a map (`bpftool map dump` would show it)
/// or copied anywhere else.
#[inline(always)]
pub(crate) fn env_value(
    start: u64,
    end: u64,
    name: [u64; 2],
    scratch: *mut [u8; ENV_STRING_BYTES],
) -> Result<Option<u64>, i32> {
    let found = find_env_value(start, end, name, scratch);
    let words = scratch.cast::<u64>();
    for word in 0..ENV_STRING_BYTES / 8 {
        // SAFETY: scratch points to ENV_STRING_BYTES writable bytes, 8-byte
        // aligned (a map value). Volatile: LLVM would make the loop a
        // `memset` call, which BPF has not.
        unsafe { core::ptr::write_volatile(words.add(word), 0) };
    }
    found
}

#[inline(always)]
fn find_env_value(
    start: u64,
    end: u64,
    name: [u64; 2],
    scratch: *mut [u8; ENV_STRING_BYTES],
) -> Result<Option<u64>, i32> {
    let mut at = start;
    for _ in 0..MAX_ENV_STRINGS {
        if at >= end {
            return Ok(None);
        }
        // SAFETY: scratch points to ENV_STRING_BYTES writable bytes; the
        // helper writes at most that many and checks the source.
        let copied = unsafe {
            generated::bpf_probe_read_user_str(
                scratch.cast::<c_void>(),
                ENV_STRING_BYTES as u32,
                at as *const c_void,
            )
        };
        if copied < 0 {
            return Err(copied as i32);
        }
        let copied = copied as u64;
        if copied == 0 || copied >= ENV_STRING_BYTES as u64 {
            return Ok(None);
        }
        // More than the name (the NUL counted): a value follows it.
        if copied > 16 {
            // SAFETY: scratch holds at least 16 bytes, all written by the
            // helper above (copied > 16).
            let head = unsafe { core::ptr::read_unaligned(scratch.cast::<[u64; 2]>()) };
            if head == name {
                return Ok(Some(at + 16));
            }
        }
        at += copied;
    }
    Ok(None)
}

/// `bprm->filename` of a `struct linux_binprm *`.
#[inline(always)]
pub(crate) fn binprm_filename(bprm: u64, offsets: &KernelOffsets) -> Result<u64, i32> {
    read_kernel::<u64>(bprm, offsets.binprm_filename)
}

/// Reads a `T` from kernel memory at `base + offset`.
#[inline(always)]
pub(crate) fn read_kernel<T: Copy>(base: u64, offset: u32) -> Result<T, i32> {
    let ptr = base.wrapping_add(u64::from(offset)) as *const T;
    // SAFETY: bpf_probe_read_kernel validates the address and fails on a bad one.
    unsafe { bpf_probe_read_kernel(ptr) }
}

/// Reads a `T` from user memory at `addr`.
#[inline(always)]
pub(crate) fn read_user<T: Copy>(addr: u64) -> Result<T, i32> {
    // SAFETY: bpf_probe_read_user validates the address and fails on a bad one.
    unsafe { aya_ebpf::helpers::bpf_probe_read_user(addr as *const T) }
}

/// Copies `size` bytes of user memory at `src` to `dst`.
///
/// # Safety
/// `dst` must point to at least `size` writable bytes, and the caller must
/// have bounded `size` so the verifier can prove it.
#[inline(always)]
pub(crate) unsafe fn read_user_bytes(dst: *mut u8, size: u32, src: u64) -> Result<(), i32> {
    // SAFETY: the caller guarantees dst has room for size bytes; the helper checks src.
    let ret =
        unsafe { generated::bpf_probe_read_user(dst.cast::<c_void>(), size, src as *const c_void) };
    if ret < 0 { Err(ret as i32) } else { Ok(()) }
}

/// Which address space a pointer is in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    /// A process's memory (`bpf_probe_read_user_str`).
    User,
    /// Kernel memory (`bpf_probe_read_kernel_str`).
    Kernel,
}

/// Copies the NUL-terminated string at `src` into `dst`. Returns the number
/// of bytes copied including the NUL; a result of `N` means the string may
/// have been cut.
#[inline(always)]
pub(crate) fn read_str<const N: usize>(
    space: Space,
    dst: *mut [u8; N],
    src: u64,
) -> Result<usize, i32> {
    let (dst, size, src) = (dst.cast::<c_void>(), N as u32, src as *const c_void);
    // SAFETY: dst points to N writable bytes (a ring buffer reservation);
    // the helpers write at most that many and check src.
    let copied = unsafe {
        match space {
            Space::User => generated::bpf_probe_read_user_str(dst, size, src),
            Space::Kernel => generated::bpf_probe_read_kernel_str(dst, size, src),
        }
    };
    if copied < 0 {
        Err(copied as i32)
    } else {
        Ok(copied as usize)
    }
}

/// Copies `len` bytes (at most [`ARGS_BYTES`]) of user memory at `src` into
/// `dst`. Never reads past `src + len`: the bytes after the argument area are
/// the environment, which podtrace must not capture ([`env_value`] looks
/// for one variable in it without copying the rest out).
#[inline(always)]
pub(crate) fn read_user_args(dst: *mut [u8; ARGS_BYTES], src: u64, len: u64) -> Result<usize, i32> {
    // Two calls with sizes the verifier can bound: the full buffer, or a length
    // masked below the buffer size.
    let size = if len >= ARGS_BYTES as u64 {
        ARGS_BYTES as u32
    } else {
        (len as u32) & (ARGS_BYTES as u32 - 1)
    };
    // SAFETY: dst points to ARGS_BYTES writable bytes and size <= ARGS_BYTES;
    // the helper checks src.
    let ret =
        unsafe { generated::bpf_probe_read_user(dst.cast::<c_void>(), size, src as *const c_void) };
    if ret < 0 {
        Err(ret as i32)
    } else {
        Ok(size as usize)
    }
}
