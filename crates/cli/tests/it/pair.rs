//! `switchboard pair`: a one-time code signs a device in to the web UI as a new approve token,
//! once.

use serde_json::Value;
use switchboard_testkit::{CliSandbox, FakeApi, Scenario};

use crate::serve::{client, http, start_daemon};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phone_signs_in_once_with_a_code_and_holds_an_approve_token() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap().trim().to_owned();

    // In a terminal: the link as a QR code, and what to do with it.
    let (code, out, err) =
        client(data.path(), &["pair", "--name", "tablet", "--minutes", "2"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains('█') && out.contains("/pair/"), "{out}");
    assert!(out.contains("Sign in as tablet"), "{out}");
    assert!(err.contains("--public-url"), "a loopback link is flagged: {err}");

    let (code, out, err) = client(data.path(), &["pair", "--name", "phone", "--json"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let made: Value = serde_json::from_str(out.trim()).unwrap();
    let url = made["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&daemon.url), "{made}");
    assert!(made["expires_ms"].as_u64().is_some(), "{made}");

    // Looking at the page uses nothing; its button signs this browser in.
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap();
    let page = browser.get(&url).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.text().await.unwrap().contains("Sign in as phone"));
    let signed = browser.post(&url).send().await.unwrap();
    assert_eq!(signed.status().as_u16(), 303);
    let cookie = signed.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.starts_with("switchboard_token=sb_") && cookie.contains("HttpOnly"), "{cookie}");
    let phone_token = cookie["switchboard_token=".len()..].split(';').next().unwrap().to_owned();
    let ui = browser
        .get(format!("{}/", daemon.url))
        .header("cookie", format!("switchboard_token={phone_token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(ui.status().as_u16(), 200, "signed in to the web UI");
    let me = http(&daemon.url, &phone_token, reqwest::Method::GET, "/api/me", None).await;
    assert_eq!(me["scope"], "approve", "{me}");
    let tokens = http(&daemon.url, &token, reqwest::Method::GET, "/api/tokens", None).await;
    assert!(
        tokens.as_array().unwrap().iter().any(|t| t["name"] == "phone" && t["scope"] == "approve"),
        "listed: {tokens}"
    );

    // Once: used, it signs nobody in; nor does a code that is not one.
    assert_eq!(browser.post(&url).send().await.unwrap().status().as_u16(), 410);
    assert_eq!(browser.get(&url).send().await.unwrap().status().as_u16(), 410);
    let forged = format!("{}/pair/{}", daemon.url, "0".repeat(32));
    assert_eq!(browser.post(&forged).send().await.unwrap().status().as_u16(), 410);
    // The name is the token's now.
    let (code, _, err) = client(data.path(), &["pair", "--name", "phone"]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("exists"), "{err}");
    // Revoked like any other: the phone is signed out.
    let (code, out, err) = client(data.path(), &["token", "revoke", "phone"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let me = crate::http_client()
        .get(format!("{}/api/me", daemon.url))
        .bearer_auth(&phone_token)
        .send()
        .await
        .unwrap();
    assert_eq!(me.status().as_u16(), 401);
}
