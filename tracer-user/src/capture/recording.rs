//! `podtrace record` files: the kernel's records, verbatim, with what is
//! needed to replay them later.
//!
//! Format (version 1), little-endian:
//!
//! ```text
//! magic    8 bytes  "PTRACE\0\x01" (the last byte is the format version)
//! hlen     u32      length of the header
//! header   hlen     JSON: RecordingHeader (versions, host, clock anchor)
//! records  …        repeated: u32 length, then that many bytes of one
//!                   ring buffer record (tracer_common wire format)
//! ```
//!
//! The records are the kernel's own bytes (plus those user space writes in the
//! same format for what was open at start), so a new event kind needs no
//! format change; `wire_version` says which wire format they follow. A file
//! cut short (the agent was killed) replays up to its last whole record and
//! says so.
//!
//! Recordings hold plaintext payloads — TLS included — and may hold tokens
//! and Secrets: they are created with mode 0600, and should be handled like
//! the credentials they may contain.

use std::{
    fs::{File, OpenOptions},
    io::{self, BufReader, BufWriter, Read, Seek as _, SeekFrom, Write},
    os::unix::fs::OpenOptionsExt as _,
    path::Path,
};

use serde::{Deserialize, Serialize};

use super::clock::WallClock;

/// First bytes of a recording; the last byte is the format version.
pub const MAGIC: [u8; 8] = *b"PTRACE\0\x01";
/// Version of the record wire format (`tracer_common`) this agent writes.
/// Bump it when a wire struct changes incompatibly.
pub const WIRE_VERSION: u32 = 1;
/// Largest header or record accepted when reading: anything longer is a
/// corrupt length, not data.
const MAX_CHUNK_BYTES: u32 = 1 << 20;

/// What a recording says about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingHeader {
    /// `tracer_common` wire format of the records.
    pub wire_version: u32,
    /// Version of the podtrace that recorded it.
    pub podtrace_version: String,
    /// Host name of the recording machine.
    pub hostname: String,
    /// Kernel release of the recording machine.
    pub kernel: String,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC at the start, to turn the records'
    /// monotonic timestamps into wall-clock time.
    pub realtime_minus_monotonic_ns: i128,
    /// Payload bytes kept per syscall while recording.
    pub data_bytes: u32,
    /// Targets running when recording started, by tgid, with their names
    /// (their exec happened before the recording).
    pub known_processes: Vec<(u32, String)>,
    /// etcd members running when recording started, by tgid, with their
    /// names (absent from recordings made before podtrace named members).
    #[serde(default)]
    pub etcd_members: Vec<(u32, String)>,
}

impl RecordingHeader {
    /// A header for a recording made now on this host.
    pub fn here(clock: &WallClock, data_bytes: u32, known: KnownProcesses) -> Self {
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .map(|s| s.trim().to_owned())
                .unwrap_or_default()
        };
        Self {
            wire_version: WIRE_VERSION,
            podtrace_version: env!("CARGO_PKG_VERSION").to_owned(),
            hostname: read("/proc/sys/kernel/hostname"),
            kernel: read("/proc/sys/kernel/osrelease"),
            realtime_minus_monotonic_ns: clock.realtime_minus_monotonic_ns(),
            data_bytes,
            known_processes: known.names,
            etcd_members: known.etcd_members,
        }
    }
}

/// What podtrace knows of the targets running before its events begin.
#[derive(Clone, Debug, Default)]
pub struct KnownProcesses {
    /// Names by tgid (their exec happened before).
    pub names: Vec<(u32, String)>,
    /// etcd members' names by tgid.
    pub etcd_members: Vec<(u32, String)>,
}

/// Failure to read or write a recording.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// The file could not be opened, read or written.
    #[error("{path}")]
    Io {
        /// The recording.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Not a podtrace recording, or one of a format this podtrace cannot read.
    #[error("{path} is not a podtrace recording of format 1 (magic {found:02x?})")]
    BadMagic {
        /// The file.
        path: String,
        /// Its first bytes.
        found: Vec<u8>,
    },
    /// The header is not valid.
    #[error("{path}: malformed header: {reason}")]
    BadHeader {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Records of a wire format this podtrace does not read.
    #[error("{path} holds wire format {found}; this podtrace reads {WIRE_VERSION}")]
    WireVersion {
        /// The file.
        path: String,
        /// Its wire version.
        found: u32,
    },
}

/// Writes a recording.
#[derive(Debug)]
pub struct RecordingWriter {
    out: BufWriter<File>,
    /// Records written.
    pub records: u64,
}

impl RecordingWriter {
    /// Creates `path` (mode 0600, replacing nothing: an existing file is an
    /// error) and writes the magic and header.
    pub fn create(path: &Path, header: &RecordingHeader) -> Result<Self, RecordingError> {
        let io_error = |source| RecordingError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io_error)?;
        let mut out = BufWriter::new(file);
        let json = serde_json::to_vec(header).map_err(|err| io_error(io::Error::other(err)))?;
        out.write_all(&MAGIC).map_err(io_error)?;
        out.write_all(&(json.len() as u32).to_le_bytes())
            .map_err(io_error)?;
        out.write_all(&json).map_err(io_error)?;
        Ok(Self { out, records: 0 })
    }

    /// Appends one record.
    pub fn write_record(&mut self, record: &[u8]) -> io::Result<()> {
        self.out.write_all(&(record.len() as u32).to_le_bytes())?;
        self.out.write_all(record)?;
        self.records += 1;
        Ok(())
    }

    /// Flushes buffered records to the file.
    pub fn finish(mut self) -> io::Result<u64> {
        self.out.flush()?;
        self.out.get_ref().sync_all()?;
        Ok(self.records)
    }
}

/// Reads a recording record by record.
#[derive(Debug)]
pub struct RecordingReader<R> {
    input: R,
    /// The recording's header.
    pub header: RecordingHeader,
    /// Records read so far.
    pub records: u64,
    /// Set when the file ended inside a record (the agent was killed while
    /// writing): the records before it were all returned.
    pub truncated: bool,
}

/// The first bytes of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

impl RecordingReader<Box<dyn Read + Send>> {
    /// Opens `path` and reads its header. A gzip-compressed recording
    /// (`gzip -9 file.ptrace`: they shrink about eightfold) is read as is.
    pub fn open(path: &Path) -> Result<Self, RecordingError> {
        let display = path.display().to_string();
        let io = |source| RecordingError::Io {
            path: display.clone(),
            source,
        };
        let mut file = File::open(path).map_err(io)?;
        let mut magic = [0u8; 2];
        let got = read_up_to(&mut file, &mut magic).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        let input: Box<dyn Read + Send> = if got == magic.len() && magic == GZIP_MAGIC {
            Box::new(BufReader::new(flate2::read::GzDecoder::new(
                BufReader::new(file),
            )))
        } else {
            Box::new(BufReader::new(file))
        };
        Self::new(input, &display)
    }
}

impl<R: Read> RecordingReader<R> {
    /// Reads the magic and header from `input` (`name` is used in errors).
    pub fn new(mut input: R, name: &str) -> Result<Self, RecordingError> {
        let mut magic = [0u8; 8];
        let got = read_up_to(&mut input, &mut magic).map_err(|source| RecordingError::Io {
            path: name.to_owned(),
            source,
        })?;
        if got < magic.len() || magic != MAGIC {
            return Err(RecordingError::BadMagic {
                path: name.to_owned(),
                found: magic[..got].to_vec(),
            });
        }
        let bad_header = |reason: String| RecordingError::BadHeader {
            path: name.to_owned(),
            reason,
        };
        let len = read_len(&mut input).map_err(|err| bad_header(err.to_string()))?;
        let mut json = vec![0u8; len as usize];
        input
            .read_exact(&mut json)
            .map_err(|err| bad_header(err.to_string()))?;
        let header: RecordingHeader =
            serde_json::from_slice(&json).map_err(|err| bad_header(err.to_string()))?;
        if header.wire_version != WIRE_VERSION {
            return Err(RecordingError::WireVersion {
                path: name.to_owned(),
                found: header.wire_version,
            });
        }
        Ok(Self {
            input,
            header,
            records: 0,
            truncated: false,
        })
    }

    /// The wall clock of the recording machine at the time of recording.
    pub fn clock(&self) -> WallClock {
        WallClock::from_offset(self.header.realtime_minus_monotonic_ns)
    }

    /// The next record, `Ok(None)` at the end (see [`Self::truncated`]).
    pub fn next_record(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut len_bytes = [0u8; 4];
        match read_up_to(&mut self.input, &mut len_bytes)? {
            0 => return Ok(None),
            4 => {}
            _ => {
                self.truncated = true;
                return Ok(None);
            }
        }
        let len = u32::from_le_bytes(len_bytes);
        if len > MAX_CHUNK_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "record {} claims {len} bytes: corrupt recording",
                    self.records + 1
                ),
            ));
        }
        let mut record = vec![0u8; len as usize];
        if read_up_to(&mut self.input, &mut record)? < record.len() {
            self.truncated = true;
            return Ok(None);
        }
        self.records += 1;
        Ok(Some(record))
    }
}

fn read_len(input: &mut impl Read) -> io::Result<u32> {
    let mut bytes = [0u8; 4];
    input.read_exact(&mut bytes)?;
    let len = u32::from_le_bytes(bytes);
    if len > MAX_CHUNK_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("length {len} is implausible"),
        ));
    }
    Ok(len)
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_up_to(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn header() -> RecordingHeader {
        RecordingHeader::here(
            &WallClock::anchor(),
            4096,
            KnownProcesses {
                names: vec![(1, "etcd".to_owned())],
                etcd_members: vec![(1, "m1".to_owned())],
            },
        )
    }

    #[test]
    fn a_gzip_compressed_recording_reads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ptrace");
        let mut writer = RecordingWriter::create(&path, &header()).unwrap();
        writer.write_record(b"first").unwrap();
        writer.write_record(&[7; 300]).unwrap();
        writer.finish().unwrap();
        let gz = dir.path().join("r.ptrace.gz");
        let mut encoder =
            flate2::write::GzEncoder::new(File::create(&gz).unwrap(), flate2::Compression::best());
        encoder.write_all(&std::fs::read(&path).unwrap()).unwrap();
        encoder.finish().unwrap();
        let mut reader = RecordingReader::open(&gz).unwrap();
        assert_eq!(reader.next_record().unwrap().unwrap(), b"first");
        assert_eq!(reader.next_record().unwrap().unwrap(), vec![7; 300]);
        assert!(reader.next_record().unwrap().is_none());
        assert!(!reader.truncated);
    }

    #[test]
    fn records_round_trip_and_the_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ptrace");
        let mut writer = RecordingWriter::create(&path, &header()).unwrap();
        writer.write_record(b"first").unwrap();
        writer.write_record(b"").unwrap();
        writer.write_record(&[7; 300]).unwrap();
        assert_eq!(writer.finish().unwrap(), 3);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );

        let mut reader = RecordingReader::open(&path).unwrap();
        assert_eq!(reader.header.wire_version, WIRE_VERSION);
        assert_eq!(
            reader.next_record().unwrap().as_deref(),
            Some(&b"first"[..])
        );
        assert_eq!(reader.next_record().unwrap().as_deref(), Some(&b""[..]));
        assert_eq!(reader.next_record().unwrap().map(|r| r.len()), Some(300));
        assert_eq!(reader.next_record().unwrap(), None);
        assert!(!reader.truncated);
    }

    #[test]
    fn existing_file_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ptrace");
        std::fs::write(&path, b"keep").unwrap();
        assert!(RecordingWriter::create(&path, &header()).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"keep");
    }

    #[test]
    fn file_cut_inside_a_record_replays_what_came_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ptrace");
        let mut writer = RecordingWriter::create(&path, &header()).unwrap();
        writer.write_record(b"whole").unwrap();
        writer.write_record(b"cut short").unwrap();
        writer.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let mut reader = RecordingReader::new(&bytes[..bytes.len() - 3], "cut").unwrap();
        assert_eq!(
            reader.next_record().unwrap().as_deref(),
            Some(&b"whole"[..])
        );
        assert_eq!(reader.next_record().unwrap(), None);
        assert!(reader.truncated);
        assert_eq!(reader.records, 1);
    }

    #[test]
    fn other_files_are_refused_with_a_clear_error() {
        let err = RecordingReader::new(&b"#!/bin/sh\n"[..], "script").unwrap_err();
        assert!(matches!(err, RecordingError::BadMagic { .. }), "{err}");
        let err = RecordingReader::new(&b"PTR"[..], "short").unwrap_err();
        assert!(matches!(err, RecordingError::BadMagic { .. }), "{err}");
        let mut future = MAGIC.to_vec();
        let json = br#"{"wire_version":99,"podtrace_version":"9","hostname":"h","kernel":"k","realtime_minus_monotonic_ns":0,"data_bytes":1,"known_processes":[]}"#;
        future.extend((json.len() as u32).to_le_bytes());
        future.extend(json);
        let err = RecordingReader::new(&future[..], "future").unwrap_err();
        assert!(
            matches!(err, RecordingError::WireVersion { found: 99, .. }),
            "{err}"
        );
    }

    #[test]
    fn corrupt_record_length_is_an_error_not_an_allocation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ptrace");
        RecordingWriter::create(&path, &header())
            .unwrap()
            .finish()
            .unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend(u32::MAX.to_le_bytes());
        let mut reader = RecordingReader::new(&bytes[..], "corrupt").unwrap();
        assert!(reader.next_record().is_err());
    }
}
