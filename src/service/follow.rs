//! `import --follow DIR`: tail a PBS server's accounting directory
//! (`server_priv/accounting/YYYYMMDD`, one file per day) and record every
//! job as its end record is written.
//!
//! The position (file, byte offset, line) is kept in `follow_cursor`, per
//! directory and cluster, and advanced only after the lines before it were
//! recorded, so a restarted follower resumes where the last one stopped; a
//! crash between recording and advancing re-reads those lines, which are
//! then replays. Only whole lines are read: a line PBS is still writing is
//! left for the next look. When a newer day's file exists, the current one
//! is read to its end once more and the follower moves on; a last line
//! without a newline then was cut short (PBS writes each line whole) and
//! is kept as malformed ([`crate::ingest::read_cut_short`]), not charged. A
//! file the follower has not finished that disappears (compressed, moved)
//! stops it with an error rather than skipping its jobs. A file put in
//! place of the one being read (a copy-and-truncate rotation, a rename and
//! create, a restore) is read again from its start, its jobs recorded or
//! replayed: the cursor keeps a digest of what was read before its offset
//! ([`seen`]), and a file that is shorter than the offset or differs there
//! is another file. A first start reads the directory from its oldest
//! file: back-filling history is the same operation, and what was imported
//! before is replayed, not charged again.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;

use super::import::{ImportError, Summary};
use super::record::{RecordError, Recorder, Source, Submission};
use crate::db::follow::{self, Cursor};
use crate::domain::posting::RejectKind;
use crate::ingest::{Format, Item, KeptOptions, MAX_LINE, ReadOptions, parser};

/// Bytes read from a file at a time.
const CHUNK: usize = 8 << 20;

/// What to follow.
#[derive(Debug, Clone)]
pub struct Follow {
    pub dir: PathBuf,
    pub format: Format,
    pub options: ReadOptions,
    /// How long to wait when there is nothing new.
    pub poll: Duration,
    /// Jobs per transaction, at most.
    pub batch_size: usize,
}

/// The day files of a directory: names of eight digits, oldest first.
pub fn day_files(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut files: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.len() == 8 && n.bytes().all(|b| b.is_ascii_digit()))
        .collect();
    files.sort();
    Ok(files)
}

/// The key of a followed directory in `follow_cursor`: format, cluster and
/// the directory's canonical path.
pub fn source_key(f: &Follow) -> std::io::Result<String> {
    let dir = std::fs::canonicalize(&f.dir)?;
    Ok(format!(
        "{}:{}:{}",
        f.format.as_str(),
        f.options.cluster.as_deref().unwrap_or(""),
        dir.display()
    ))
}

fn read_error(f: &Follow, file: &str, source: std::io::Error) -> ImportError {
    ImportError::Read {
        name: f.dir.join(file).display().to_string(),
        source,
    }
}

/// Follow `f` until `stop` turns true, adding what it did to `summary`.
pub async fn follow(
    pool: &PgPool,
    recorder: &mut Recorder,
    f: &Follow,
    summary: &mut Summary,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ImportError> {
    let key = source_key(f).map_err(|e| ImportError::Read {
        name: f.dir.display().to_string(),
        source: e,
    })?;
    let mut conn = pool.acquire().await.map_err(RecordError::Connection)?;
    let mut cursor = follow::get(&mut conn, &key).await.map_err(RecordError::Db)?;
    drop(conn);
    match &cursor {
        Some(c) => tracing::info!(
            "resuming {} at {}:{} (byte {})",
            f.dir.display(),
            c.file,
            c.lines,
            c.byte_offset
        ),
        None => tracing::info!("following {} from its oldest file", f.dir.display()),
    }
    loop {
        if *stop.borrow() {
            return Ok(());
        }
        let files = day_files(&f.dir).map_err(|e| ImportError::Read {
            name: f.dir.display().to_string(),
            source: e,
        })?;
        // The file to read: the cursor's, else the first one after it.
        let current = match &cursor {
            Some(c) if files.contains(&c.file) => Some(c.clone()),
            // Never skip what was not read: a file compressed or moved away
            // before the follower finished it would lose its jobs silently.
            Some(c) => {
                return Err(ImportError::Follow(format!(
                    "{}, where following stopped (after line {}), is gone: restore it (e.g. gunzip it) \
                     and start again to read the rest of it; nothing after that line has been recorded",
                    f.dir.join(&c.file).display(),
                    c.lines
                )));
            }
            None => files.first().map(|n| Cursor {
                file: n.clone(),
                byte_offset: 0,
                lines: 0,
                seen: None,
            }),
        };
        if let Some(at) = current {
            let newer = files.iter().any(|n| *n > at.file);
            let after = read_file(pool, recorder, f, &key, at.clone(), newer, summary).await?;
            let progressed = after != at;
            cursor = Some(after.clone());
            if progressed {
                continue;
            }
            if newer {
                // Done with this day: on to the next file.
                if let Some(next) = files.iter().find(|n| **n > after.file) {
                    tracing::info!("{} done ({} lines); now {next}", after.file, after.lines);
                    let next = Cursor {
                        file: next.clone(),
                        byte_offset: 0,
                        lines: 0,
                        seen: None,
                    };
                    save(pool, &key, &next).await?;
                    cursor = Some(next);
                    continue;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(f.poll) => {}
            _ = stop.changed() => {}
        }
    }
}

async fn save(pool: &PgPool, key: &str, cursor: &Cursor) -> Result<(), ImportError> {
    let mut conn = pool.acquire().await.map_err(RecordError::Connection)?;
    follow::set(&mut conn, key, cursor).await.map_err(RecordError::Db)?;
    Ok(())
}

/// Bytes of a file's start and of its end before the cursor that [`seen`]
/// digests.
const SEEN: u64 = 4096;

/// A digest of what a follower read of a file before `offset`: the offset,
/// `head`, the file's first `min(offset, SEEN)` bytes, and `tail`, the
/// `min(offset, SEEN)` bytes before `offset`. PBS only appends to its day
/// files, so these never change under a follower; a file replaced under
/// the same name by a longer one (whose jobs reading on from `offset` would
/// skip) differs in them. A replacement that keeps both ends byte for byte
/// is not told apart: its middle is taken as read. Digested from the bytes
/// the follower read, never read again from the file for the purpose: a
/// file replaced between reading and saving then differs at the next look.
pub fn seen(offset: u64, head: &[u8], tail: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(offset.to_be_bytes());
    h.update(head);
    h.update(tail);
    h.finalize().to_vec()
}

/// `len` bytes of `file` from `at`; `None` when it ends before them (it was
/// cut shorter meanwhile).
fn bytes_at(file: &std::fs::File, at: u64, len: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0; usize::try_from(len).unwrap_or(0)];
    match file.read_exact_at(&mut buf, at) {
        Ok(()) => Ok(Some(buf)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

/// Bytes `from..to` of `a` followed by `b`.
fn window(a: &[u8], b: &[u8], from: usize, to: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(to - from);
    if from < a.len() {
        out.extend_from_slice(&a[from..to.min(a.len())]);
    }
    if to > a.len() {
        out.extend_from_slice(&b[from.max(a.len()) - a.len()..to - a.len()]);
    }
    out
}

/// Read what is new in `at.file` from `at.byte_offset` and record it, batch
/// by batch, advancing the cursor after each. `finished`: a newer file
/// exists, so a last line without a newline will not be finished: it was
/// cut short.
async fn read_file(
    pool: &PgPool,
    recorder: &mut Recorder,
    f: &Follow,
    key: &str,
    mut at: Cursor,
    finished: bool,
    summary: &mut Summary,
) -> Result<Cursor, ImportError> {
    let path = f.dir.join(&at.file);
    let mut file = std::fs::File::open(&path).map_err(|e| read_error(f, &at.file, e))?;
    let len = file.metadata().map_err(|e| read_error(f, &at.file, e))?.len();
    let offset = u64::try_from(at.byte_offset).unwrap_or(0);
    // What was read before the offset, as the file holds it now: its first
    // bytes and those just before the offset.
    let n = offset.min(SEEN);
    let ends = if len < offset {
        None
    } else {
        let head = bytes_at(&file, 0, n).map_err(|e| read_error(f, &at.file, e))?;
        let before = bytes_at(&file, offset - n, n).map_err(|e| read_error(f, &at.file, e))?;
        head.zip(before)
    };
    let replaced = match (&ends, &at.seen) {
        (None, _) => Some(format!("it is shorter than where reading stopped (byte {offset})")),
        (Some((head, before)), Some(digest)) if offset > 0 && seen(offset, head, before) != *digest => Some(format!(
            "its bytes before where reading stopped (byte {offset}) are not those read"
        )),
        _ => None,
    };
    // The bytes just before `base` (`prior`) and the file's first SEEN
    // bytes when `base` is past them (`head`), for the digest of each
    // position saved below.
    let (prior, head) = match (replaced, ends) {
        (None, Some((head, before))) => (before, head),
        (why, _) => {
            tracing::warn!(
                "{}: {}: another file was put in its place; reading it again from the start (what was recorded is replayed)",
                path.display(),
                why.unwrap_or_default()
            );
            at.byte_offset = 0;
            at.lines = 0;
            at.seen = None;
            (Vec::new(), Vec::new())
        }
    };
    let base = at.byte_offset;
    file.seek(SeekFrom::Start(u64::try_from(base).unwrap_or(0)))
        .map_err(|e| read_error(f, &at.file, e))?;
    let mut buf = Vec::new();
    (&mut file)
        .take(CHUNK as u64)
        .read_to_end(&mut buf)
        .map_err(|e| read_error(f, &at.file, e))?;
    // Whole lines only, unless the file is finished (then a last line
    // without a newline is read, as cut short) or a line fills a whole
    // chunk (reported as too long, piece by piece).
    let whole = if (finished && buf.len() < CHUNK) || !buf.contains(&b'\n') && buf.len() == CHUNK {
        buf.len()
    } else {
        buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
    };
    if whole == 0 {
        return Ok(at);
    }
    let mut p = parser(f.format, &f.options).map_err(ImportError::Options)?;
    let mut jobs = Vec::new();
    let mut malformed = Vec::new();
    let mut start = 0;
    let batch = f.batch_size.max(1);
    while start < whole {
        let end = buf[start..whole]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(whole, |i| start + i + 1);
        let bytes = &buf[start..end];
        let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        at.lines += 1;
        summary.lines += 1;
        let reference = format!("{}:{}", path.display(), at.lines);
        let source = |raw: String, raw_bytes: Option<Vec<u8>>, options: KeptOptions| Source {
            intake: None,
            format: f.format.source(),
            reference: reference.clone(),
            raw,
            raw_bytes,
            options,
            job: None,
        };
        if bytes.len() > MAX_LINE {
            let prefix = String::from_utf8_lossy(&bytes[..MAX_LINE.min(4096)]).into_owned();
            let reason = format!("the line is longer than {MAX_LINE} bytes");
            summary.reject(RejectKind::Malformed, &reference, &reason);
            malformed.push((source(prefix, None, p.options()), reason));
        } else {
            // The byte policy of every path: bad bytes read as U+FFFD, the
            // bytes kept; a NUL byte is a damaged record.
            let has_nul = bytes.contains(&0);
            let (text, exact) = crate::ingest::decode(bytes.to_vec());
            let (text, exact) = if has_nul {
                (text.replace('\0', "\u{FFFD}"), Some(bytes.to_vec()))
            } else {
                (text, exact)
            };
            // The day is over and its file ends in the middle of a line
            // (PBS writes each whole): unless it is a record never charged,
            // kept, not charged, and not charged by a retry either.
            let cut = buf[end - 1] != b'\n' && f.format.whole_lines();
            let item = if cut {
                crate::ingest::read_cut_short(&mut *p, &text, exact.as_deref())
            } else {
                crate::ingest::read_record(&mut *p, &text, exact.as_deref())
            };
            match item {
                None => {}
                Some(Item::Skip(s)) => *summary.skipped.entry(s).or_default() += 1,
                Some(Item::Bad(reason)) => {
                    summary.reject(RejectKind::Malformed, &reference, &reason);
                    let (job, options) = if cut {
                        let options = KeptOptions::new(ReadOptions {
                            cut_short: true,
                            ..p.options().read_options().clone()
                        });
                        (p.cut_job_key(&text), options)
                    } else {
                        (p.job_key(&text), p.options())
                    };
                    malformed.push((
                        Source {
                            intake: None,
                            job,
                            ..source(text, exact, options)
                        },
                        reason,
                    ));
                }
                Some(Item::Job(job)) => jobs.push(Submission {
                    input: *job,
                    source: source(text, exact, p.options()),
                }),
            }
        }
        start = end;
        at.byte_offset = base + end as i64;
        if jobs.len() + malformed.len() >= batch || start >= whole {
            // The digest of what is read up to here, from `prior` and `buf`,
            // which hold the file's bytes from `base - prior.len()` on.
            let upto = prior.len() + end;
            let n = (base as usize + end).min(SEEN as usize);
            let tail = window(&prior, &buf[..end], upto - n, upto);
            let head = if base as u64 >= SEEN {
                head.clone()
            } else {
                window(&prior, &buf[..end], 0, n)
            };
            at.seen = Some(seen(u64::try_from(at.byte_offset).unwrap_or(0), &head, &tail));
            let outcomes = recorder.record(&jobs, &malformed).await?;
            for (job, outcome) in jobs.iter().zip(&outcomes) {
                summary.count(outcome, &job.source.reference);
            }
            jobs.clear();
            malformed.clear();
            save(pool, key, &at).await?;
            tracing::debug!(
                "{}:{}: {} recorded, {} replayed so far",
                at.file,
                at.lines,
                summary.recorded,
                summary.replayed
            );
        }
    }
    Ok(at)
}
