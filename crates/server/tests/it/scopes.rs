//! Named, scoped tokens: every route and every gRPC method checks the scope it needs, in both
//! directions; a frame on a socket needs its own; an `approve` token answers a real CLI's
//! request and the decision names it; a revoked token is refused, on new requests and on a
//! socket it opened.

use std::collections::HashMap;
use std::str::FromStr as _;
use std::sync::Arc;

use futures::StreamExt;
use serde_json::{json, Value};
use switchboard_server::api::Guard;
use switchboard_server::grpc::pb;
use switchboard_server::Scope;
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::{is_result, touch_and_ls, Server, TOKEN};

/// Makes a token named `name` with `scope` (as the daemon's own admin token); the token.
async fn make_token(server: &Server, name: &str, scope: Scope) -> String {
    let (status, made) =
        server.post("/api/tokens", json!({"name": name, "scope": scope.as_str()})).await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["scope"], scope.as_str());
    made["token"].as_str().unwrap().to_owned()
}

/// A token of every scope: `admin` is the daemon's own.
async fn one_of_each(server: &Server) -> HashMap<Scope, String> {
    let mut tokens = HashMap::from([(Scope::Admin, TOKEN.to_owned())]);
    for scope in [Scope::Read, Scope::Approve, Scope::Operate] {
        tokens.insert(scope, make_token(server, &format!("{scope}-token"), scope).await);
    }
    tokens
}

fn message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_and_method_checks_its_scope_both_ways() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let tokens = one_of_each(&server).await;

    let mut checked = 0;
    for route in switchboard_server::api::routes() {
        let Guard::Api(needed) = route.guard else { continue };
        let path = route
            .path
            .replace("{id}", "some-id")
            .replace("{request_id}", "some-request")
            .replace("{name}", "nobody")
            .replace("{*path}", "app.js");
        let method = reqwest::Method::from_str(route.method).unwrap();
        let body = (method != reqwest::Method::GET).then(|| json!({}));
        let call = |token: String| {
            let (method, path, body) = (method.clone(), path.clone(), body.clone());
            let server = &server;
            async move { server.request_as(&token, method, &path, body).await }
        };
        // The scope it needs gets past the check (the handler may still refuse the request).
        let (status, answer) = call(tokens[&needed].clone()).await;
        assert!(
            status != 401 && status != 403,
            "{} {} with a {needed} token: {status} {answer}",
            route.method,
            route.path
        );
        // The scope below it is refused, and told which scope it lacks.
        if let Some(below) = needed.below() {
            let (status, answer) = call(tokens[&below].clone()).await;
            assert_eq!(
                status, 403,
                "{} {} with a {below} token: {answer}",
                route.method, route.path
            );
            assert!(
                message(&answer).contains(&format!("the {needed} scope")),
                "{} {}: {answer}",
                route.method,
                route.path
            );
        }
        let (status, _) = call("sb_not-a-token".to_owned()).await;
        assert_eq!(status, 401, "{} {} with no valid token", route.method, route.path);
        checked += 1;
    }
    assert!(checked >= 29, "every API route was checked ({checked})");

    // gRPC: each method of the service, called with an empty message and the scope it needs,
    // then the one below; every call's outcome before the handler is its status.
    let channel = tonic::transport::Endpoint::from_shared(server.base.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    for (method, needed) in switchboard_server::grpc::METHOD_SCOPES {
        let call = |token: Option<&str>| {
            let mut grpc = tonic::client::Grpc::new(channel.clone());
            let mut request = tonic::Request::new(pb::InterruptResponse::default());
            if let Some(token) = token {
                request
                    .metadata_mut()
                    .insert("authorization", format!("Bearer {token}").parse().unwrap());
            }
            let path = tonic::codegen::http::uri::PathAndQuery::from_str(&format!(
                "/switchboard.v1.Switchboard/{method}"
            ))
            .unwrap();
            async move {
                grpc.ready().await.unwrap();
                let codec = tonic_prost::ProstCodec::<pb::InterruptResponse, pb::InterruptResponse>::default();
                grpc.server_streaming(request, path, codec).await.err()
            }
        };
        let outcome = call(Some(&tokens[needed])).await;
        assert!(
            !outcome.as_ref().is_some_and(|status| matches!(
                status.code(),
                tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
            )),
            "{method} with a {needed} token: {outcome:?}"
        );
        if let Some(below) = needed.below() {
            let status = call(Some(&tokens[&below])).await.expect("refused");
            assert_eq!(status.code(), tonic::Code::PermissionDenied, "{method}: {status:?}");
            assert!(status.message().contains(&format!("the {needed} scope")), "{status:?}");
        }
        let status = call(None).await.expect("refused");
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{method}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approve_token_answers_a_real_request_and_the_decision_names_it() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("by-phone.txt")).when_prompt("RUN"))
            .reply(Reply::text("All done.").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let phone = make_token(&server, "phone", Scope::Approve).await;
    let watcher = make_token(&server, "watcher", Scope::Read).await;
    let ci = make_token(&server, "ci", Scope::Operate).await;

    // What each token is, as the web UI asks.
    let (_, me) = server.request_as(&phone, reqwest::Method::GET, "/api/me", None).await;
    assert_eq!(
        (me["name"].as_str(), me["scope"].as_str()),
        (Some("phone"), Some("approve")),
        "{me}"
    );
    // And the daemon's home, where a face shortens the paths it shows.
    let home = std::env::var("HOME").ok();
    assert_eq!(me["home"].as_str(), home.as_deref(), "{me}");
    // The list names every token and shows none of them.
    let (_, list) = server.get("/api/tokens").await;
    let names: Vec<&str> =
        list.as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["admin", "ci", "phone", "watcher"]);
    for secret in [&phone, &watcher, &ci, &TOKEN.to_owned()] {
        assert!(!list.to_string().contains(secret.as_str()), "no token in the list: {list}");
    }
    assert!(list[2]["last_used_ms"].is_u64(), "phone was used: {list}");
    // A name is taken once; a bad one is refused with why.
    let (status, taken) =
        server.post("/api/tokens", json!({"name": "phone", "scope": "read"})).await;
    assert_eq!((status, taken["error"]["code"].as_str()), (409, Some("exists")), "{taken}");
    let (status, bad) = server.post("/api/tokens", json!({"name": "a b", "scope": "read"})).await;
    assert_eq!(status, 400, "{bad}");
    let (status, bad) = server.post("/api/tokens", json!({"name": "x", "scope": "root"})).await;
    assert!(status == 400 && message(&bad).contains("root"), "{bad}");

    // `operate` starts sessions, but only `admin` chooses the program, its environment or MCP
    // servers.
    let cwd = sandbox.workdir().display().to_string();
    for (field, value) in [
        ("claude", json!("/bin/sh")),
        ("env", json!({"X": "1"})),
        ("mcp_config", json!([r#"{"mcpServers":{}}"#])),
        ("policy", json!("auto-approve")),
    ] {
        let mut body = json!({"cwd": cwd});
        body[field] = value;
        let (status, refused) =
            server.request_as(&ci, reqwest::Method::POST, "/api/sessions", Some(body)).await;
        assert_eq!(status, 403, "{field}: {refused}");
        assert!(
            message(&refused).contains(field) && message(&refused).contains("admin"),
            "{refused}"
        );
    }
    let (status, refused) = server
        .request_as(&phone, reqwest::Method::POST, "/api/sessions", Some(json!({"cwd": cwd})))
        .await;
    assert_eq!(status, 403, "approve does not start sessions: {refused}");
    let (status, session) = server
        .request_as(
            &ci,
            reqwest::Method::POST,
            "/api/sessions",
            Some(json!({"cwd": cwd, "prompt": "RUN it"})),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();

    // A read token watches; its answers and messages are refused, frame by frame.
    let mut ws = server.ws_as(&watcher, &format!("/api/sessions/{id}/subscribe?after=0")).await;
    let frames = ws.until(|frame| frame["event"]["event"] == "permission_requested").await;
    let request_id = frames.last().unwrap()["event"]["request_id"].as_str().unwrap().to_owned();
    // The request records who started the turn: the token that sent the prompt.
    assert_eq!(frames.last().unwrap()["event"]["started_by"], "token ci (api)");
    ws.send(json!({"type": "permission_response", "request_id": request_id, "behavior": "allow"}))
        .await;
    let refused = ws.until(|frame| frame["type"] == "error").await;
    let error = &refused.last().unwrap()["error"];
    assert_eq!(error["code"], "forbidden", "{error}");
    assert!(error["message"].as_str().unwrap().contains("the approve scope"), "{error}");
    ws.send(json!({"type": "user_message", "content": "hi"})).await;
    let refused = ws.until(|frame| frame["type"] == "error").await;
    assert!(refused.last().unwrap()["error"]["message"].as_str().unwrap().contains("operate"));

    // The approve token sees the request, may not steer, and answers it.
    let (status, pending) = server
        .request_as(&phone, reqwest::Method::GET, &format!("/api/sessions/{id}/permissions"), None)
        .await;
    assert_eq!((status, pending.as_array().map(Vec::len)), (200, Some(1)), "{pending}");
    assert_eq!(pending[0]["started_by"], "token ci (api)", "the waiting list says so too");
    let (status, _) = server
        .request_as(
            &phone,
            reqwest::Method::POST,
            &format!("/api/sessions/{id}/messages"),
            Some(json!({"content": "go faster"})),
        )
        .await;
    assert_eq!(status, 403);
    // Approving another input than the model's is steering: not for an approve token.
    let (status, refused) = server
        .request_as(
            &phone,
            reqwest::Method::POST,
            &format!("/api/sessions/{id}/permissions/{request_id}"),
            Some(json!({"behavior": "allow", "updated_input": {"command": "cat /etc/passwd"}})),
        )
        .await;
    assert_eq!(status, 403, "{refused}");
    assert!(message(&refused).contains("the operate scope"), "{refused}");
    let (status, answer) = server
        .request_as(
            &phone,
            reqwest::Method::POST,
            &format!("/api/sessions/{id}/permissions/{request_id}"),
            Some(json!({"behavior": "allow", "by": "alice"})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let frames = ws.until(is_result).await;
    let decided = frames
        .iter()
        .find(|frame| frame["event"]["event"] == "permission_decided")
        .expect("the decision reached the read token's socket");
    assert_eq!(
        decided["event"]["by"],
        json!({"kind": "person", "who": "alice, token phone (api)"}),
        "the decision names the token that made it"
    );
    assert!(sandbox.file("by-phone.txt").exists(), "the approved tool ran");

    // Revoked: refused from now on, and the socket it opened takes no more frames.
    let (status, revoked) =
        server.send(reqwest::Method::DELETE, "/api/tokens/watcher", json!(null)).await;
    assert_eq!((status, revoked["name"].as_str()), (200, Some("watcher")), "{revoked}");
    let (status, _) =
        server.request_as(&watcher, reqwest::Method::GET, "/api/sessions", None).await;
    assert_eq!(status, 401);
    let mut events = server.ws_as(&phone, "/api/events").await;
    let (status, _) = server.send(reqwest::Method::DELETE, "/api/tokens/phone", json!(null)).await;
    assert_eq!(status, 200);
    // Sockets that only stream end too: the subscription and the dashboard feed.
    for (what, socket) in [("subscription", &mut ws), ("dashboard", &mut events)] {
        let ended = tokio::time::timeout(crate::WAIT, async {
            loop {
                match socket.socket.next().await {
                    None | Some(Err(_)) | Some(Ok(WsMessage::Close(_))) => break,
                    Some(Ok(_)) => {}
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "the {what} ended with its token");
    }
    let (status, _) = server.send(reqwest::Method::DELETE, "/api/tokens/admin", json!(null)).await;
    assert_eq!(status, 400, "the daemon's own token is not revoked over the API");
    server.stop().await;
}
