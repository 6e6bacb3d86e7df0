use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::*;

fn config(per_run: u64, keep_size: u64) -> OutputConfig {
    OutputConfig {
        dir: None,
        keep_size,
        keep_for: Duration::from_secs(3600),
        per_run,
    }
}

fn store(dir: &Path, per_run: u64, keep_size: u64) -> Arc<OutputStore> {
    Arc::new(OutputStore::open(dir, &config(per_run, keep_size)).unwrap())
}

/// The streams and texts of a kept file's lines.
fn lines(path: &Path) -> Vec<(String, String)> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let parsed = parse_line(line).unwrap();
            (parsed.stream.to_owned(), parsed.line.to_owned())
        })
        .collect()
}

#[test]
fn a_run_within_its_bound_is_kept_whole_in_order_with_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), 1 << 20, 1 << 30);
    let mut output = store.begin("backup", "backup-1700000000000", 1);
    output.line(Stream::Stdout, "copying");
    output.line(Stream::Stderr, "warning: slow");
    output.line(Stream::Stdout, "");
    output.end("exit 0");
    let path = store.find("backup", "backup-1700000000000", None).unwrap();
    assert_eq!(
        lines(&path),
        [
            ("stdout".into(), "copying".into()),
            ("stderr".into(), "warning: slow".into()),
            ("stdout".into(), String::new()),
            ("zkcron".into(), "ended: exit 0".into()),
        ]
    );
    assert!(!store.is_live(&path));
    assert_eq!(store.kept_bytes(), fs::metadata(&path).unwrap().len());
}

#[test]
fn a_run_past_its_bound_keeps_its_head_and_its_tail_and_says_what_was_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let per_run = 64 * 1024;
    let store = store(dir.path(), per_run, 1 << 30);
    let mut output = store.begin("noisy", "noisy-1", 1);
    let total = 10_000;
    for n in 0..total {
        output.line(Stream::Stdout, &format!("line {n:05}"));
    }
    output.end("exit 0");
    let path = store.find("noisy", "noisy-1", Some(1)).unwrap();
    let kept = lines(&path);
    let numbers: Vec<u32> = kept
        .iter()
        .filter(|(stream, _)| stream == "stdout")
        .map(|(_, text)| text["line ".len()..].parse().unwrap())
        .collect();
    // The head from the first line, the tail to the last, each unbroken.
    let gap = numbers
        .windows(2)
        .position(|pair| pair[1] != pair[0] + 1)
        .unwrap();
    assert_eq!(numbers[0], 0);
    assert_eq!(*numbers.last().unwrap(), total - 1);
    assert!(
        numbers[gap + 1..]
            .windows(2)
            .all(|pair| pair[1] == pair[0] + 1)
    );
    let dropped = numbers[gap + 1] - numbers[gap] - 1;
    let said = kept
        .iter()
        .find(|(stream, text)| stream == "zkcron" && text.contains("dropped here"))
        .expect("the dropped lines counted");
    assert!(
        said.1.starts_with(&format!("{dropped} lines (")),
        "{said:?}, {dropped} dropped"
    );
    assert_eq!(kept.last().unwrap().1, "ended: exit 0");
    let size = fs::metadata(&path).unwrap().len();
    assert!(
        size <= per_run + 1024,
        "{size} bytes kept of a {per_run} bound"
    );
    assert!(
        size >= per_run / 2,
        "{size}: the tail is at least a segment"
    );
    let leftovers: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
    assert_eq!(
        leftovers.len(),
        1,
        "the tail's segments are joined and gone"
    );
}

#[test]
fn the_store_stays_within_its_size_removing_the_oldest_runs_first() {
    let dir = tempfile::tempdir().unwrap();
    let keep_size = 256 * 1024;
    let store = store(dir.path(), 16 * 1024, keep_size);
    let runs = 10_000;
    for run in 0..runs {
        let mut output = store.begin("often", &format!("often-{run}"), 1);
        output.line(Stream::Stdout, &format!("run {run} says hello"));
        output.end("exit 0");
    }
    assert!(store.kept_bytes() <= keep_size, "{}", store.kept_bytes());
    let on_disk: u64 = fs::read_dir(dir.path().join("often"))
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap().len())
        .sum();
    assert_eq!(
        on_disk,
        store.kept_bytes(),
        "the count is what the disk holds"
    );
    assert!(
        store
            .find("often", &format!("often-{}", runs - 1), None)
            .is_some()
    );
    assert!(
        store.find("often", "often-0", None).is_none(),
        "the oldest went first"
    );
    // Opened again, the store counts what is there and keeps within its size too.
    drop(store);
    let smaller = OutputStore::open(dir.path(), &config(16 * 1024, keep_size / 2)).unwrap();
    assert!(smaller.kept_bytes() <= keep_size / 2);
    assert!(
        smaller
            .find("often", &format!("often-{}", runs - 1), None)
            .is_some()
    );
}

#[test]
fn output_older_than_keep_for_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), 16 * 1024, 1 << 30);
    let mut output = store.begin("daily", "daily-1", 1);
    output.line(Stream::Stdout, "done");
    output.end("exit 0");
    store.prune(SystemTime::now() + Duration::from_secs(1800));
    assert!(
        store.find("daily", "daily-1", None).is_some(),
        "within keep_for"
    );
    store.prune(SystemTime::now() + Duration::from_secs(3700));
    assert!(
        store.find("daily", "daily-1", None).is_none(),
        "past keep_for"
    );
    assert_eq!(store.kept_bytes(), 0);
}

#[test]
fn a_run_abandoned_or_cut_by_a_stopped_daemon_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), 64 * 1024, 1 << 30);
    let mut dropped = store.begin("job", "job-1", 1);
    dropped.line(Stream::Stdout, "started");
    drop(dropped);
    let path = store.find("job", "job-1", None).unwrap();
    assert!(
        lines(&path)
            .last()
            .unwrap()
            .1
            .starts_with("ended: no outcome")
    );

    // A daemon killed past a run's head leaves its tail beside its file.
    let mut cut = store.begin("job", "job-2", 3);
    for n in 0..5000 {
        cut.line(Stream::Stdout, &format!("line {n}"));
    }
    // Killed after the runner wrote out all it had read.
    cut.flush();
    std::mem::forget(cut);
    let reopened = OutputStore::open(dir.path(), &config(64 * 1024, 1 << 30)).unwrap();
    let path = reopened.find("job", "job-2", None).unwrap();
    let kept = lines(&path);
    assert!(
        kept.iter()
            .any(|(_, text)| text.contains("lines may be missing here"))
    );
    assert_eq!(kept[kept.len() - 2].1, "line 4999", "the tail joined");
    assert!(kept.last().unwrap().1.starts_with("ended: unknown"));
    assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 2);
}

#[tokio::test]
async fn a_follower_sees_every_line_as_it_comes_and_stops_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), 1 << 20, 1 << 30);
    let mut output = store.begin("slow", "slow-1", 1);
    output.line(Stream::Stdout, "first");
    output.flush();
    let path = store.find("slow", "slow-1", None).unwrap();
    let (mut seen, mut reader) = tokio::io::duplex(64 * 1024);
    let follower = {
        let store = Arc::clone(&store);
        let path = path.clone();
        tokio::spawn(async move {
            store
                .read(&path, true, &mut seen, &CancellationToken::new())
                .await
        })
    };
    let mut text = String::new();
    let mut buffer = [0_u8; 4096];
    // The first line arrives while the run is still going.
    while !text.contains("first") {
        let read = tokio::io::AsyncReadExt::read(&mut reader, &mut buffer)
            .await
            .unwrap();
        text.push_str(std::str::from_utf8(&buffer[..read]).unwrap());
    }
    assert!(!text.contains("ended"));
    output.line(Stream::Stderr, "second");
    output.end("exit 1");
    let ended = follower.await.unwrap().unwrap();
    assert_eq!(ended, FollowEnd::Ended);
    tokio::io::AsyncReadExt::read_to_string(&mut reader, &mut text)
        .await
        .unwrap();
    let streams: Vec<&str> = text
        .lines()
        .map(|line| parse_line(line).unwrap().stream)
        .collect();
    assert_eq!(streams, ["stdout", "stderr", "zkcron"], "{text}");
}
