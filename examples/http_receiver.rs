//! The receiver of the HTTP delivery benchmark (bench/http_delivery.sh): answers every request
//! `200` at once and notes, per request, its due time (`Zkcron-Scheduled-At`), when it arrived
//! and its submission id, so the script can tell lateness, duplicates and misses.
//!
//! ```text
//! cargo run --release --example http_receiver -- OUT_FILE
//! ```
//! Listens on a free port of 127.0.0.1 and prints `listening on PORT`. Each request appends a
//! line `SCHEDULED_UNIX_MS ARRIVAL_UNIX_MS.FRACTION SUBMISSION_ID` to OUT_FILE (written in
//! batches at least every 50 ms). Stops on SIGTERM or SIGINT, after writing what it has.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use tokio::sync::mpsc;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args()
        .nth(1)
        .ok_or("usage: http_receiver OUT_FILE")?;
    let mut file = std::io::BufWriter::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out)?,
    );
    let (notes, mut noted) = mpsc::unbounded_channel::<String>();
    let app = Router::new().fallback(move |headers: HeaderMap| {
        let notes = notes.clone();
        async move {
            let arrival = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64()
                * 1000.0;
            let header = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-")
                    .to_owned()
            };
            let scheduled = chrono::DateTime::parse_from_rfc3339(&header("zkcron-scheduled-at"))
                .map_or(-1, |at| at.timestamp_millis());
            let id = header("zkcron-submission-id");
            let _ = notes.send(format!("{scheduled} {arrival:.3} {id}\n"));
            StatusCode::OK
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on {}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut flush = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            Some(line) = noted.recv() => file.write_all(line.as_bytes())?,
            _ = flush.tick() => file.flush()?,
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    server.abort();
    while let Ok(line) = noted.try_recv() {
        file.write_all(line.as_bytes())?;
    }
    file.flush()?;
    Ok(())
}
