//! Measures the web console's first render: headless Chromium (through chromedriver) opens a
//! console page COUNT times, each a fresh navigation, and reads the page's own
//! `zkcron-rendered` mark — set on the first animation frame after the page has drawn its data —
//! in ms since the navigation started. HTML, script, style, the API's answers and the drawing
//! are all inside it.
//!
//! ```text
//! cargo run --release --example console_render -- http://127.0.0.1:9464/console/#/jobs [COUNT] [--reload]
//! ```
//! Each load comes from about:blank, as a new tab's would; with `--reload`, from the same page
//! (Chromium keeps its renderer process).
//! Needs /usr/bin/chromium and /usr/bin/chromedriver (Debian's chromium, chromium-driver).
//! Prints each render, then count, p50, p90 and max; and the bytes the page loaded.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use fantoccini::ClientBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .ok_or("usage: console_render URL [COUNT] [--reload]")?;
    let count: usize = args.next().map_or(Ok(20), |n| n.parse())?;
    let reload = args.next().as_deref() == Some("--reload");
    let profile = tempfile::tempdir()?;
    let mut driver = Command::new("/usr/bin/chromedriver")
        .arg("--port=0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = driver.stdout.take().ok_or("chromedriver's stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let port: u16 = loop {
        let line = lines.next().ok_or("chromedriver exited")??;
        if let Some(port) = line.strip_prefix("ChromeDriver was started successfully on port ") {
            break port.trim_end_matches('.').parse()?;
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        serde_json::json!({
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                     "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--window-size=1280,900",
                     format!("--user-data-dir={}", profile.path().display())],
        }),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await?;
    let mut renders = Vec::new();
    let mut weight = 0.0;
    for round in 0..=count {
        // A new document each time. A tab coming from another site starts a renderer process
        // for the page; a reload (a query that changes each time) reuses the one it has.
        if reload {
            let (page, fragment) = url.split_once('#').unwrap_or((&url, ""));
            client
                .goto(&format!("{page}?load={round}#{fragment}"))
                .await?;
        } else {
            client.goto("about:blank").await?;
            client.goto(&url).await?;
        }
        let mut rendered = None;
        for _ in 0..200 {
            let mark = client
                .execute(
                    "const m = performance.getEntriesByName('zkcron-rendered'); \
                     return m.length ? m[0].startTime : null;",
                    Vec::new(),
                )
                .await?;
            if let Some(ms) = mark.as_f64() {
                rendered = Some(ms);
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let ms = rendered.ok_or("the page never drew its data (5 s)")?;
        weight = client
            .execute(
                "return performance.getEntriesByType('resource').concat(performance.getEntriesByType('navigation')) \
                 .filter(e => !e.name.includes('/v1/')).reduce((sum, e) => sum + e.decodedBodySize, 0);",
                Vec::new(),
            )
            .await?
            .as_f64()
            .unwrap_or(0.0);
        let parts = client
            .execute(
                "const n = performance.getEntriesByType('navigation')[0]; \
                 const api = performance.getEntriesByType('resource').filter(e => e.name.includes('/v1/')); \
                 return `html ${n.responseEnd.toFixed(0)} ms, script run ${n.domContentLoadedEventStart.toFixed(0)} ms, ` + \
                   api.map(e => `${new URL(e.name).pathname} ${e.startTime.toFixed(0)}..${e.responseEnd.toFixed(0)} ms`) \
                   .concat(performance.getEntriesByType('mark').map(m => `${m.name} ${m.startTime.toFixed(0)} ms`)).join(', ');",
                Vec::new(),
            )
            .await?;
        // The first load warms the process and the node's index; it is not counted.
        if round > 0 {
            println!(
                "render {round}: {ms:.1} ms ({})",
                parts.as_str().unwrap_or_default()
            );
            renders.push(ms);
        }
    }
    client.close().await?;
    let _ = driver.kill();
    renders.sort_by(f64::total_cmp);
    let pick = |q: f64| {
        let rank = ((q * renders.len() as f64).ceil() as usize).clamp(1, renders.len());
        renders[rank - 1]
    };
    println!(
        "first render: count {} p50 {:.1} ms p90 {:.1} ms max {:.1} ms",
        renders.len(),
        pick(0.5),
        pick(0.9),
        renders.last().copied().unwrap_or(f64::NAN)
    );
    println!("page weight (html, script, style, icon): {weight:.0} bytes");
    Ok(())
}
