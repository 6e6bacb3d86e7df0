//! The web console: one page and its script and style, compiled into the binary (nothing to
//! install, no CDN: it works on an air-gapped host), and the security headers of every answer.
//!
//! The page renders what `/v1/` answers with DOM text nodes only, so a job name, a pause reason
//! or a payload is shown as text, never run; the Content-Security-Policy allows no inline script
//! or style to back that up. Writes send the bearer token the operator typed, kept in the tab's
//! `sessionStorage`: no cookie, so another site cannot make a browser steer zkcron.
//!
//! Owns: the assets and their headers. Must not: compute anything the API does not answer.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use super::state::HttpState;

const INDEX_HTML: &str = include_str!("console/index.html");
const APP_JS: &str = include_str!("console/app.js");
const APP_CSS: &str = include_str!("console/app.css");
const ICON_SVG: &str = include_str!("console/icon.svg");

/// Everything the page loads comes from this listener; nothing may frame it.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

pub(super) fn routes() -> Router<HttpState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/console/") }))
        .route("/console", get(|| async { Redirect::to("/console/") }))
        .route(
            "/console/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/console/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/console/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
        .route(
            "/console/icon.svg",
            get(|| async { asset("image/svg+xml", ICON_SVG) }),
        )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // Revalidated on every load, so an upgraded node never serves a page with an old
            // script.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// Added to every answer of the listener, the API's JSON included.
pub(super) async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_weighs_less_than_150_kb() {
        let weight = INDEX_HTML.len() + APP_JS.len() + APP_CSS.len() + ICON_SVG.len();
        assert!(weight < 150 * 1024, "the console weighs {weight} bytes");
    }

    #[test]
    fn no_asset_has_inline_script_or_style_or_a_foreign_address() {
        for (name, text) in [
            ("index.html", INDEX_HTML),
            ("app.js", APP_JS),
            ("app.css", APP_CSS),
        ] {
            for forbidden in [
                "http://",
                "https://",
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(!text.contains(forbidden), "{name} contains {forbidden}");
            }
        }
        assert!(!INDEX_HTML.contains("<script>"), "inline script");
        assert!(!INDEX_HTML.contains("<style"), "inline style");
        assert!(!INDEX_HTML.contains(" style="), "inline style attribute");
        let handler = INDEX_HTML.split(" on").skip(1).find(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        assert_eq!(handler, None, "inline event handler");
    }
}
