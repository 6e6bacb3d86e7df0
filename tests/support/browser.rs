//! Headless Chromium, driven over WebDriver: Debian's `chromium` and `chromium-driver`
//! (`.ci/run` installs both). The console's tests open its pages and press its buttons as a
//! person would; nothing of the page is imitated.
//!
//! chromedriver runs in its own process group with a fresh profile in a temp dir; the browser it
//! starts belongs to that group, and dropping the [`Browser`] kills the group by its id.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::{Within, wait_for};

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// chromedriver says it listens within this (a cold start on a loaded 2-core machine).
const DRIVER_START: Duration = Duration::from_secs(30);

pub struct Browser {
    driver: Child,
    pub client: Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium session with a `width` ×
    /// `height` window.
    pub async fn start(width: u32, height: u32) -> Self {
        for tool in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(tool).exists(),
                "{tool} is missing: apt-get install chromium chromium-driver (.ci/run does)"
            );
        }
        let profile = tempfile::tempdir().expect("browser profile dir");
        let mut driver = Command::new(CHROMEDRIVER)
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn chromedriver");
        let stdout = driver.stdout.take().expect("chromedriver's stdout");
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        // Reads the port line, then keeps draining so the driver never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = line
                    .strip_prefix("ChromeDriver was started successfully on port ")
                    .and_then(|rest| rest.trim_end_matches('.').parse::<u16>().ok())
                {
                    let _ = port_tx.send(port);
                }
            }
        });
        let port = port_rx.recv_timeout(DRIVER_START).unwrap_or_else(|_| {
            panic!("chromedriver did not say its port within {DRIVER_START:?}")
        });
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            serde_json::json!({
                "binary": CHROMIUM,
                "args": [
                    "--headless=new",
                    // As root in a container, Chromium's sandbox cannot start.
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    // This machine's network is closed: no background connection may wait on it.
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--hide-scrollbars",
                    format!("--user-data-dir={}", profile.path().display()),
                    format!("--window-size={width},{height}"),
                ],
            }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session through chromedriver");
        Self {
            driver,
            client,
            _profile: profile,
        }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("open the page");
    }

    /// Runs `script` in the page (as a function body) and returns its value.
    pub async fn js(&self, script: &str) -> serde_json::Value {
        self.client
            .execute(script, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// The text of the first element matching `css`, or `None` while there is none.
    pub async fn text(&self, css: &str) -> Option<String> {
        let script = format!(
            "const el = document.querySelector({}); return el ? el.innerText : null;",
            serde_json::to_string(css).expect("a selector as JSON")
        );
        self.js(&script).await.as_str().map(str::to_owned)
    }

    /// Waits until the first element matching `css` has a text for which `ok` holds; returns it.
    /// The page changes by itself (its refresh, an answer): this polls the DOM every 100 ms. A
    /// wait in vain says what the element last showed, and the page's banners and answer.
    pub async fn wait_text(
        &self,
        what: &str,
        css: &str,
        within: impl Into<Within>,
        ok: impl Fn(&str) -> bool,
    ) -> String {
        let last = std::sync::Mutex::new(None::<String>);
        let found = super::try_wait_for(what, within, || async {
            let text = self.text(css).await;
            if let Ok(mut last) = last.lock() {
                last.clone_from(&text);
            }
            text.filter(|text| ok(text))
        })
        .await;
        match found {
            Ok(text) => text,
            Err(not_reached) => {
                let shown = last.lock().ok().and_then(|last| last.clone());
                let banners = self.text("#banners").await.unwrap_or_default();
                let answer = self.text("#answer").await.unwrap_or_default();
                panic!(
                    "{not_reached}\n{css} showed: {shown:?}\nbanners: {banners:?}\nanswer: {answer:?}"
                )
            }
        }
    }

    /// The first element matching `css`, waiting for it to exist (the page draws as answers
    /// come).
    async fn element(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} in the page: {e}"))
    }

    /// Clicks the first element matching `css`. The page redraws its tables every 2 s, so the
    /// button found may be replaced before the click lands (a stale element): it is found and
    /// clicked again, for up to 10 s.
    pub async fn click(&self, css: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match self.element(css).await.click().await {
                Ok(()) => return,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    panic!("click {css}: {e}")
                }
                // A pause between attempts, not a wait for an event: no event marks the end of
                // the page's redraw.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Types `text` into the input matching `css`, replacing what it held.
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.element(css).await;
        element.clear().await.expect("clear the input");
        element
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    /// A PNG of the window as it is now.
    pub async fn screenshot(&self) -> Vec<u8> {
        self.client.screenshot().await.expect("screenshot")
    }

    /// Ends the session (Chromium exits), then the driver.
    pub async fn close(self) {
        let Self { client, .. } = &self;
        let _ = client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The group holds chromedriver and every Chromium process it started.
        let _ = killpg(Pid::from_raw(self.driver.id() as i32), Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}
