//! One attempt's output as it is written: its head into its file, then, past the head's bound,
//! its tail into two rotating segments beside it, joined to the file with a line saying what was
//! dropped when the run ends.
//!
//! Owns: a run's file while it is written, its bound, and the end line.
//! Must not: decide what a run prints or when it ends (the runner calls it).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::Utc;

use super::names::{ENDED, OURS, stamped};
use super::shelf::Shelf;

/// Which of a process's streams a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    /// As the log and the kept file name it.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// One attempt's output on its way to the store; keeps nothing when the store could not start
/// its file. Dropped before [`RunOutput::end`], its file ends saying so.
#[derive(Debug)]
pub struct RunOutput(Option<Writing>);

impl RunOutput {
    /// Keeps nothing: no store, or it could not start this run's file.
    pub fn not_kept() -> Self {
        RunOutput(None)
    }

    pub(super) fn kept(writing: Writing) -> Self {
        RunOutput(Some(writing))
    }

    /// Whether this run's output is being kept.
    pub fn is_kept(&self) -> bool {
        self.0.as_ref().is_some_and(|writing| !writing.broken)
    }

    /// One line of the job's output (without its `\n`).
    pub fn line(&mut self, stream: Stream, text: &str) {
        if let Some(writing) = &mut self.0 {
            writing.write(&stamped(Utc::now(), stream.name(), text));
        }
    }

    /// One line of ours, after the job's: what happened to the output or the run.
    pub fn note(&mut self, text: &str) {
        if let Some(writing) = &mut self.0 {
            writing.write(&stamped(Utc::now(), OURS, text));
        }
    }

    /// Writes out what is buffered, for a reader following the file: the runner calls it when
    /// it has read all the job has printed so far, so a burst of lines is one write.
    pub fn flush(&mut self) {
        if let Some(writing) = &mut self.0 {
            writing.flush();
        }
    }

    /// Ends the file with how the run ended (`exit 0`, `timed out`): joins its tail, counts it
    /// among the kept and prunes. Blocking file I/O, up to half a run's bound copied.
    pub fn end(mut self, outcome: &str) {
        if let Some(writing) = self.0.take() {
            writing.finish(outcome);
        }
    }

    /// [`RunOutput::end`] with the run's `outcome`, off the runtime's workers; nothing to do
    /// for output not kept.
    pub async fn end_with(self, outcome: &crate::run::RunOutcome) {
        if self.0.is_none() {
            return;
        }
        let outcome = outcome.to_string();
        let _ = tokio::task::spawn_blocking(move || self.end(&outcome)).await;
    }
}

impl Default for RunOutput {
    fn default() -> Self {
        RunOutput::not_kept()
    }
}

impl Drop for RunOutput {
    fn drop(&mut self) {
        if let Some(writing) = self.0.take() {
            writing.finish("no outcome: the run was abandoned before it ended");
        }
    }
}

/// A run's file being written.
#[derive(Debug)]
pub(super) struct Writing {
    shelf: Arc<Shelf>,
    path: PathBuf,
    file: BufWriter<File>,
    /// Bytes in `file`.
    written: u64,
    /// Past the head: where the lines go now.
    tail: Option<Tail>,
    /// A write failed (a full disk): nothing more is written, and the file says so if it can.
    broken: bool,
}

/// The tail of a run past its head: the newest lines in `current`, the ones before them in
/// `previous`; older ones are dropped and counted.
#[derive(Debug)]
struct Tail {
    current: BufWriter<File>,
    current_len: (u64, u64),
    previous: Option<(u64, u64)>,
    /// Lines and bytes dropped between the head and the tail.
    dropped: (u64, u64),
}

impl Writing {
    pub(super) fn create(shelf: Arc<Shelf>, path: PathBuf) -> io::Result<Self> {
        if let Some(job_dir) = path.parent() {
            super::names::make_private_dir(job_dir)?;
        }
        let file = BufWriter::new(create_private(&path)?);
        Ok(Self {
            shelf,
            path,
            file,
            written: 0,
            tail: None,
            broken: false,
        })
    }

    fn write(&mut self, line: &str) {
        if self.broken {
            return;
        }
        if let Err(err) = self.write_bounded(line) {
            self.stop_keeping(&err);
        }
    }

    fn flush(&mut self) {
        if self.broken {
            return;
        }
        let flushed = match &mut self.tail {
            Some(tail) => self.file.flush().and_then(|()| tail.current.flush()),
            None => self.file.flush(),
        };
        if let Err(err) = flushed {
            self.stop_keeping(&err);
        }
    }

    /// A write failed (a full disk): nothing more is kept, and the file says so if it can.
    fn stop_keeping(&mut self, err: &io::Error) {
        self.broken = true;
        tracing::warn!(path = %self.path.display(), error = %err, "cannot keep more of this run's output (the run goes on)");
        let note = stamped(
            Utc::now(),
            OURS,
            &format!("output no longer kept here: {err}"),
        );
        let _ = self
            .file
            .write_all(note.as_bytes())
            .and_then(|()| self.file.flush());
    }

    fn write_bounded(&mut self, line: &str) -> io::Result<()> {
        let len = line.len() as u64;
        let limits = self.shelf.limits;
        if self.tail.is_none() && self.written + len > limits.head {
            let note = format!(
                "past {} of output: the rest is kept as its last {} or less, shown when the run ends",
                size(limits.head),
                size(2 * limits.segment)
            );
            self.file
                .write_all(stamped(Utc::now(), OURS, &note).as_bytes())?;
            self.tail = Some(Tail {
                current: BufWriter::new(create_private(&segment(&self.path, Segment::Current))?),
                current_len: (0, 0),
                previous: None,
                dropped: (0, 0),
            });
        }
        let Some(tail) = &mut self.tail else {
            self.file.write_all(line.as_bytes())?;
            self.written += len;
            return Ok(());
        };
        if tail.current_len.1 > 0 && tail.current_len.1 + len > limits.segment {
            if let Some((lines, bytes)) = tail.previous {
                tail.dropped.0 += lines;
                tail.dropped.1 += bytes;
            }
            tail.current.flush()?;
            fs::rename(
                segment(&self.path, Segment::Current),
                segment(&self.path, Segment::Previous),
            )?;
            tail.previous = Some(tail.current_len);
            tail.current = BufWriter::new(create_private(&segment(&self.path, Segment::Current))?);
            tail.current_len = (0, 0);
        }
        tail.current.write_all(line.as_bytes())?;
        tail.current_len.0 += 1;
        tail.current_len.1 += len;
        Ok(())
    }

    fn finish(mut self, outcome: &str) {
        let end = stamped(Utc::now(), OURS, &format!("{ENDED}{outcome}"));
        let joined = match self.tail.take() {
            None => self.file.write_all(end.as_bytes()),
            Some(tail) => self.join_tail(tail, &end),
        }
        .and_then(|()| self.file.flush());
        if let Err(err) = joined {
            tracing::warn!(path = %self.path.display(), error = %err, "cannot end this run's kept output");
        }
        let size = self
            .file
            .get_ref()
            .metadata()
            .map_or(self.written, |meta| meta.len());
        let shelf = Arc::clone(&self.shelf);
        shelf.ended(std::mem::take(&mut self.path), size);
    }

    /// Appends the dropped count, the tail and `end` to the file, and removes the segments.
    fn join_tail(&mut self, tail: Tail, end: &str) -> io::Result<()> {
        let (lines, bytes) = tail.dropped;
        if lines > 0 {
            let note = format!("{lines} lines ({}) dropped here", size(bytes));
            self.file
                .write_all(stamped(Utc::now(), OURS, &note).as_bytes())?;
        }
        let mut current = tail.current;
        current.flush()?;
        drop(current);
        for part in [Segment::Previous, Segment::Current] {
            let path = segment(&self.path, part);
            match File::open(&path) {
                Ok(mut from) => {
                    if !self.broken {
                        io::copy(&mut from, &mut self.file)?;
                    }
                    fs::remove_file(&path)?;
                }
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(err),
            }
        }
        self.file.write_all(end.as_bytes())
    }
}

/// The two files a run's tail rotates through, beside its file.
#[derive(Clone, Copy)]
enum Segment {
    Current,
    Previous,
}

const CURRENT_SUFFIX: &str = ".tail";
const PREVIOUS_SUFFIX: &str = ".tail.old";

fn segment(path: &Path, which: Segment) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(match which {
        Segment::Current => CURRENT_SUFFIX,
        Segment::Previous => PREVIOUS_SUFFIX,
    });
    PathBuf::from(name)
}

/// Whether `path` is a tail segment (which only a run being written has).
pub(super) fn is_tail_segment(path: &Path) -> bool {
    path.to_str()
        .is_some_and(|path| path.ends_with(CURRENT_SUFFIX) || path.ends_with(PREVIOUS_SUFFIX))
}

/// Joins the tail segments a stopped daemon left beside a run's file into it, saying that
/// lines may be missing there and that the run's end was not seen.
pub(super) fn mend_abandoned(segment_path: &Path) {
    let Some(text) = segment_path.to_str() else {
        return;
    };
    let base = text
        .strip_suffix(PREVIOUS_SUFFIX)
        .or_else(|| text.strip_suffix(CURRENT_SUFFIX))
        .unwrap_or(text);
    let base = PathBuf::from(base);
    // Both segments are mended at the first one's turn.
    if !segment(&base, Segment::Previous).exists() && !segment(&base, Segment::Current).exists() {
        return;
    }
    let mended = (|| -> io::Result<()> {
        let mut file = OpenOptions::new().append(true).open(&base)?;
        let note = "the daemon stopped during this run: lines may be missing here";
        file.write_all(stamped(Utc::now(), OURS, note).as_bytes())?;
        for part in [Segment::Previous, Segment::Current] {
            let path = segment(&base, part);
            if let Ok(mut from) = File::open(&path) {
                io::copy(&mut from, &mut file)?;
                fs::remove_file(&path)?;
            }
        }
        let end = format!("{ENDED}unknown: the daemon stopped before the run ended");
        file.write_all(stamped(Utc::now(), OURS, &end).as_bytes())
    })();
    if let Err(err) = mended {
        tracing::warn!(path = %base.display(), error = %err, "cannot mend a run's kept output left by a stopped daemon");
    }
}

fn create_private(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o640)
        .open(path)
}

fn size(bytes: u64) -> String {
    bytesize::ByteSize(bytes).display().iec().to_string()
}
