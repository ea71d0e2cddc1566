//! One-tap approval links with the real CLI: a request approved through its link, another
//! denied with a reason the model reads; a link's page changes nothing; a used, an expired and
//! a forged link are refused with a page that says which.

use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_server::links::LinkClaim;
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::{is_result, Server};

/// A link's page: its status and text.
pub(crate) async fn open(server: &Server, link: &str) -> (u16, String) {
    let response = server.client().get(link).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Posts the link's form, as its page's buttons do.
pub(crate) async fn post(server: &Server, link: &str, form: &str) -> (u16, String) {
    let response = server
        .client()
        .post(link)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form.to_owned())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_approves_another_denies_with_a_reason_and_used_or_expired_ones_are_refused() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch linked.txt && echo LINKED_MARK", "description": "by link"}),
                )
                .when_prompt("FIRST"),
            )
            .reply(Reply::text("Ran it.").when_tool_result_contains("LINKED_MARK"))
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch refused.txt", "description": "refused by link"}),
                )
                .when_prompt("SECOND"),
            )
            .reply(Reply::text("Understood, not running it.").when_tool_result_contains("not from my phone")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let (id, mut ws) =
        server.open_session(json!({"cwd": sandbox.workdir(), "prompt": "FIRST"})).await;
    ws.until(|frame| frame["event"]["event"] == "permission_requested").await;
    let pending = server.daemon.waiting_in(&id).await.unwrap().remove(0);
    let link = server.daemon.approval_link(&id, &pending, "test").expect("a link");
    assert!(link.starts_with(&format!("{}/a/", server.base)), "at the public URL: {link}");

    // The page shows the request and changes nothing, however often it is fetched.
    for _ in 0..2 {
        let (status, page) = open(&server, &link).await;
        assert_eq!(status, 200, "{page}");
        assert!(
            page.contains("<code>Bash</code>") && page.contains("touch linked.txt &amp;&amp; echo"),
            "{page}"
        );
        assert!(page.contains("<form method=post>") && page.contains("value=deny"), "{page}");
    }
    assert_eq!(server.daemon.waiting_in(&id).await.unwrap().len(), 1, "a GET answers nothing");
    let response = server.client().get(&link).send().await.unwrap();
    let csp = response.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert_eq!(response.headers()["cache-control"], "no-store");
    assert_eq!(response.headers()["referrer-policy"], "no-referrer");

    // A forged link, and an expired one for the same request, are refused; it still waits.
    let mut forged = link.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(open(&server, &forged).await.0, 404);
    assert_eq!(post(&server, &forged, "decision=allow").await.0, 404);
    let expired = format!(
        "{}/a/{}",
        server.base,
        server
            .daemon
            .link_key()
            .sign(&LinkClaim {
                session: id.clone(),
                request: pending.request_id.clone(),
                expires_ms: 1,
                channel: "test".into(),
            })
            .expect("a short claim signs")
    );
    let (status, page) = open(&server, &expired).await;
    assert!(status == 410 && page.contains("This link expired"), "{status} {page}");
    let (status, page) = post(&server, &expired, "decision=allow").await;
    assert!(status == 410 && page.contains("This link expired"), "{status} {page}");
    assert_eq!(
        server.daemon.waiting_in(&id).await.unwrap().len(),
        1,
        "an expired link answers nothing"
    );
    assert_eq!(post(&server, &link, "decision=maybe").await.0, 400);

    // Approved through the link: the tool runs, and the decision names the link's channel.
    let (status, page) = post(&server, &link, "decision=allow").await;
    assert!(status == 200 && page.contains("Approved"), "{status} {page}");
    let frames = ws.until(is_result).await;
    let decided = frames.iter().find(|f| f["event"]["event"] == "permission_decided").unwrap();
    assert_eq!(decided["event"]["by"], json!({"kind": "person", "who": "link (test)"}));
    assert!(sandbox.file("linked.txt").exists(), "the approved tool ran");
    let (used_link, first_base) = (link.clone(), server.base.clone());
    // Used: refused, saying by whom.
    for (status, page) in [open(&server, &link).await, post(&server, &link, "decision=deny").await]
    {
        assert_eq!(status, 410, "{page}");
        assert!(
            page.contains("This link was used") && page.contains("approved by link (test)"),
            "{page}"
        );
    }

    // Denied through a link, with a reason the model reads.
    ws.send(json!({"type": "user_message", "content": "SECOND"})).await;
    ws.until(|frame| frame["event"]["event"] == "permission_requested").await;
    let pending = server.daemon.waiting_in(&id).await.unwrap().remove(0);
    let link = server.daemon.approval_link(&id, &pending, "test").expect("a link");
    let (status, page) =
        post(&server, &link, "decision=deny&message=not+from+my+phone%2C+sorry").await;
    assert!(status == 200 && page.contains("Denied"), "{status} {page}");
    let frames = ws.until(is_result).await;
    let result: &Value = &frames.last().unwrap()["event"]["line"];
    assert_eq!(result["result"], "Understood, not running it.", "the model read the reason");
    assert!(!sandbox.file("refused.txt").exists(), "the denied tool did not run");
    let first_link = used_link;
    let key = server.daemon.link_key().clone();
    let store = server.daemon.store().clone();
    server.stop().await;

    // After a restart the used link still says who answered: its session's log is read (once)
    // for the decisions the new daemon did not see.
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.links.key = Some(key);
    })
    .await;
    let relinked = first_link.replace(&first_base, &server.base);
    let (status, page) = open(&server, &relinked).await;
    assert_eq!(status, 410, "{page}");
    assert!(page.contains("approved by link (test)"), "{page}");
    server.stop().await;
}
