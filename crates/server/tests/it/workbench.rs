//! The rest of a person's day with an agent, with the real CLI: an image pasted into a prompt
//! reaches the model as an image block; a bad one is refused before it reaches the CLI.

use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{real_cli, CliSandbox, CliVersion, FakeApi, Reply, Scenario};

use crate::{is_result, Server};

/// A 2×2 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAD0lEQVR4nGP4zwAE/yEIABf1A/2TOHM8AAAAAElFTkSuQmCC";

fn image(media_type: &str, data: &str) -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_in_a_prompt_reaches_the_model_as_an_image_block() {
    let api =
        FakeApi::start(Scenario::new().reply(Reply::text("A small square.").when_prompt("LOOK")))
            .await
            .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let (status, session) = server.post("/api/sessions", json!({"cwd": sandbox.workdir()})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();

    // Refused at once, naming the problem; nothing reaches the CLI.
    let bad = [
        (json!([image("image/jpeg", PNG)]), "says it is image/jpeg but is image/png"),
        (json!([image("image/svg+xml", PNG)]), "media_type is one of"),
        (json!([{"type": "text", "text": "x"}, image("image/png", "%%%")]), "content[1]"),
    ];
    for (content, expected) in bad {
        let (status, error) =
            server.post(&format!("/api/sessions/{id}/messages"), json!({"content": content})).await;
        assert_eq!(status, 400, "{error}");
        assert!(error["error"]["message"].as_str().unwrap().contains(expected), "{error}");
    }

    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let content = json!([{"type": "text", "text": "LOOK at this"}, image("image/png", PNG)]);
    let (status, sent) =
        server.post(&format!("/api/sessions/{id}/messages"), json!({"content": content})).await;
    assert_eq!(status, 202, "{sent}");
    ws.until(is_result).await;
    // The prompt's projection carries the image, so every face can draw it.
    let (_, view) = server.get(&format!("/api/sessions/{id}/view")).await;
    let prompt = view["updates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|update| update["update"] == "prompt")
        .cloned()
        .unwrap_or_else(|| panic!("no prompt: {view}"));
    assert_eq!(prompt["text"], "LOOK at this", "{prompt}");
    assert_eq!(prompt["images"][0]["media_type"], "image/png", "{prompt}");
    assert_eq!(prompt["images"][0]["data"], PNG, "{prompt}");

    // At the Messages API: the text and the image, as blocks, byte for byte.
    let requests = api.conversation_requests();
    let last_user = requests
        .iter()
        .rev()
        .find_map(|request| {
            request.body["messages"]
                .as_array()?
                .iter()
                .rev()
                .find(|message| message["role"] == "user")
                .cloned()
        })
        .expect("a conversation request");
    let blocks = last_user["content"].as_array().expect("blocks").clone();
    let images: Vec<&Value> = blocks.iter().filter(|block| block["type"] == "image").collect();
    assert_eq!(images.len(), 1, "{last_user}");
    assert_eq!(images[0]["source"]["media_type"], "image/png");
    assert_eq!(images[0]["source"]["data"], PNG);
    assert!(
        blocks.iter().any(|block| block["type"] == "text"
            && block["text"].as_str().is_some_and(|text| text.contains("LOOK at this"))),
        "{last_user}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_puts_the_files_back_as_they_were_before_a_message() {
    let sandbox = CliSandbox::new().unwrap();
    let file = sandbox.workdir().join("notes.txt");
    std::fs::write(&file, "as it was\n").unwrap();
    let created = sandbox.workdir().join("fresh.txt");
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Write", json!({"file_path": file, "content": "changed\n"}))
                    .when_prompt("CHANGE"),
            )
            .reply(
                Reply::tool_use("Write", json!({"file_path": created, "content": "new\n"}))
                    .when_tool_result(),
            )
            .reply(Reply::text("Changed them.").when_tool_result()),
    )
    .await
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let policy = "[permissions]\ndefault = \"allow\"\n";
    let (id, mut ws) =
        server.open_session(json!({"cwd": sandbox.workdir(), "policy": policy})).await;
    let (status, sent) = server
        .post(&format!("/api/sessions/{id}/messages"), json!({"content": "CHANGE the notes"}))
        .await;
    assert_eq!(status, 202, "{sent}");
    let uuid = sent["uuid"].as_str().unwrap().to_owned();
    ws.until(is_result).await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "changed\n");
    assert_eq!(std::fs::read_to_string(&created).unwrap(), "new\n");

    // A dry run says what would change, and changes nothing.
    let rewind = format!("/api/sessions/{id}/rewind");
    let (status, preview) = server.post(&rewind, json!({"message": uuid, "dry_run": true})).await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["can_rewind"], true, "{preview}");
    assert_eq!(preview["files_changed"], 2, "{preview}");
    let mut paths: Vec<&str> =
        preview["files"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    paths.sort_unstable();
    assert_eq!(paths, [created.to_str().unwrap(), file.to_str().unwrap()], "{preview}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "changed\n");
    // gRPC's twin says the same.
    let mut grpc = crate::grpc::client(&server).await;
    let request = switchboard_server::grpc::pb::RewindFilesRequest {
        id: id.clone(),
        message: uuid.clone(),
        dry_run: true,
    };
    let answer = grpc.rewind_files(request).await.unwrap().into_inner();
    assert!(answer.can_rewind && answer.dry_run);
    assert_eq!(answer.files_changed, Some(2));
    assert_eq!(answer.files.len(), 2);

    // Refused with the reason: no such message, not a uuid.
    let (status, unknown) =
        server.post(&rewind, json!({"message": "00000000-0000-4000-8000-000000000000"})).await;
    assert_eq!(status, 409, "{unknown}");
    assert_eq!(unknown["error"]["code"], "cannot_rewind", "{unknown}");
    let (status, invalid) = server.post(&rewind, json!({"message": "../x"})).await;
    assert_eq!(status, 400, "{invalid}");

    // The files go back: the changed one as it was, the new one gone.
    let (status, done) = server.post(&rewind, json!({"message": uuid})).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["can_rewind"], true, "{done}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "as it was\n");
    assert!(!created.exists(), "the file Claude created is removed");
    // The log says so, for every face.
    ws.until(|frame| frame.to_string().contains("rewind_files")).await;
    let (_, view) = server.get(&format!("/api/sessions/{id}/view")).await;
    let rewound = view["updates"]
        .as_array()
        .unwrap()
        .iter()
        .any(|update| update["update"] == "notice" && update["kind"] == "rewound");
    assert!(rewound, "{view}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_s_slash_commands_are_listed_and_compact_compacts() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("Hello there.").when_prompt("HELLO"))
            .reply(Reply::text("Summary: a greeting was exchanged.")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let (id, mut ws) =
        server.open_session(json!({"cwd": sandbox.workdir(), "prompt": "HELLO"})).await;
    ws.until(is_result).await;

    // The commands the CLI offers, with what each does, for a picker.
    let (_, session) = server.get(&format!("/api/sessions/{id}")).await;
    let commands = session["slash_commands"].as_array().expect("slash_commands").clone();
    let compact = commands.iter().find(|command| command["name"] == "compact");
    let compact = compact.unwrap_or_else(|| panic!("no compact in {commands:?}"));
    assert!(compact["description"].as_str().is_some_and(|text| !text.is_empty()), "{compact}");
    assert!(commands.iter().all(|command| !command["name"].as_str().unwrap().starts_with('/')));
    // gRPC's Session lists the same.
    let mut grpc = crate::grpc::client(&server).await;
    let request = switchboard_server::grpc::pb::GetSessionRequest { id: id.clone() };
    let listed = grpc.get_session(request).await.unwrap().into_inner().slash_commands;
    assert_eq!(listed.len(), commands.len());
    assert!(listed.iter().any(|command| command.name == "compact"));

    // Sent as a message, /compact compacts: the log says so.
    let (status, sent) =
        server.post(&format!("/api/sessions/{id}/messages"), json!({"content": "/compact"})).await;
    assert_eq!(status, 202, "{sent}");
    ws.until(|frame| {
        frame["event"]["line"]["type"] == "system"
            && frame["event"]["line"]["subtype"] == "compact_boundary"
    })
    .await;
    let (_, view) = server.get(&format!("/api/sessions/{id}/view")).await;
    let compacted = view["updates"]
        .as_array()
        .unwrap()
        .iter()
        .any(|update| update["update"] == "notice" && update["kind"] == "compacted");
    assert!(compacted, "{view}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_is_sent_back_with_comments_then_approved() {
    let plan = |text: &str| Reply::tool_use("ExitPlanMode", json!({"plan": text}));
    let api = FakeApi::start(
        Scenario::new()
            .reply(plan("1. Rename the module\n2. Fix the callers").when_prompt("PLAN"))
            .reply(
                plan("1. Rename the module\n2. Fix the callers\n3. Keep the old name as an alias")
                    .when_tool_result_contains("KEEP_ALIAS"),
            )
            .reply(Reply::text("Carrying out the plan.").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let (status, session) = server
        .post(
            "/api/sessions",
            // 2.1.37's ExitPlanMode carries the plan in its input; newer CLIs read it from the
            // plan file the model wrote (into the same `plan` field), which a scripted model
            // cannot know the name of.
            json!({"cwd": sandbox.workdir(), "prompt": "PLAN the rename", "permission_mode": "plan",
                   "claude": real_cli(CliVersion::V2_1_37)}),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let asked = |frame: &Value| frame["event"]["event"] == "permission_requested";

    // The plan waits for a person (plan mode or not, no policy answers it by itself).
    let frames = ws.until(asked).await;
    let request = &frames.last().unwrap()["event"];
    assert_eq!(request["tool_name"], "ExitPlanMode", "{request}");
    assert!(request["input"]["plan"].as_str().unwrap().contains("Fix the callers"));
    let request_id = request["request_id"].as_str().unwrap();
    // Sent back with comments: Claude reads them and plans again.
    let comment = "The user wants the plan changed: KEEP_ALIAS for the old name";
    let (status, answered) = server
        .post(
            &format!("/api/sessions/{id}/permissions/{request_id}"),
            json!({"behavior": "deny", "message": comment}),
        )
        .await;
    assert_eq!(status, 200, "{answered}");
    let frames = ws.until(asked).await;
    let request = &frames.last().unwrap()["event"];
    assert!(request["input"]["plan"].as_str().unwrap().contains("alias"), "{request}");
    let sent_back = api.conversation_requests().iter().any(|request| {
        request.body.to_string().contains("KEEP_ALIAS")
            && request.body.to_string().contains("tool_result")
    });
    assert!(sent_back, "the comments reached the model as the plan's answer");
    // Approved: Claude leaves plan mode and goes on.
    let request_id = request["request_id"].as_str().unwrap();
    let (status, answered) = server
        .post(&format!("/api/sessions/{id}/permissions/{request_id}"), json!({"behavior": "allow"}))
        .await;
    assert_eq!(status, 200, "{answered}");
    ws.until(is_result).await;
    let (_, session) = server.get(&format!("/api/sessions/{id}")).await;
    assert_ne!(session["permission_mode"], "plan", "{session}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_of_a_session_read_only_with_what_it_touched() {
    let sandbox = CliSandbox::new().unwrap();
    let dir = sandbox.workdir();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "pub fn old() {}\n").unwrap();
    std::fs::write(dir.join("logo.png"), b"\x89PNG\r\n\x1a\n\0\0\0").unwrap();
    let outside = sandbox.home().join("secret.txt");
    std::fs::write(&outside, "not yours").unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("sneaky")).unwrap();
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    std::fs::write(dir.join(".git/config"), "[remote] url = https://token@example.com").unwrap();
    std::os::unix::fs::symlink(dir.join(".git"), dir.join("g")).unwrap();
    std::fs::write(dir.join(".env"), "API_KEY=not-yours").unwrap();
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Write",
                    json!({"file_path": dir.join("src/lib.rs"), "content": "pub fn new() {}\n"}),
                )
                .when_prompt("EDIT"),
            )
            .reply(Reply::text("Edited.").when_tool_result()),
    )
    .await
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let policy = "[permissions]\ndefault = \"allow\"\ndeny = [\"Read(./.env)\"]\n";
    let (_, session) = server
        .post("/api/sessions", json!({"cwd": dir, "prompt": "EDIT lib", "policy": policy}))
        .await;
    let id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    ws.until(is_result).await;

    let (status, top) = server.get(&format!("/api/sessions/{id}/files")).await;
    assert_eq!(status, 200, "{top}");
    let entries: Vec<(&str, &str, bool)> = top["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["kind"].as_str().unwrap(), e["touched"] == true))
        .collect();
    assert!(entries.contains(&("src", "dir", true)), "{top}");
    assert!(entries.contains(&("logo.png", "file", false)), "{top}");
    let (_, src) = server.get(&format!("/api/sessions/{id}/files?path=src")).await;
    assert_eq!(src["entries"][0]["path"], "src/lib.rs", "{src}");
    assert_eq!(src["entries"][0]["touched"], true, "{src}");

    let (status, file) = server.get(&format!("/api/sessions/{id}/file?path=src/lib.rs")).await;
    assert_eq!(status, 200, "{file}");
    assert_eq!(file["text"], "pub fn new() {}\n");
    assert_eq!(file["touched"], true);
    let (_, png) = server.get(&format!("/api/sessions/{id}/file?path=logo.png")).await;
    assert_eq!((png["binary"].as_bool(), png["size"].as_u64()), (Some(true), Some(11)), "{png}");
    assert!(png.get("text").is_none());

    // Nothing outside the directory, by any path.
    // Nor git's own folder (through a link either), nor what the session's policy denies to
    // Read.
    for (path, expected) in [
        ("../secret.txt", 400),
        ("sneaky", 404),
        ("%2Fetc%2Fpasswd", 400),
        (".git/config", 404),
        ("g/config", 404),
        (".env", 404),
    ] {
        let (status, refused) = server.get(&format!("/api/sessions/{id}/file?path={path}")).await;
        assert_eq!(status, expected, "{path}: {refused}");
        assert!(!refused.to_string().contains("not yours"));
        assert!(!refused.to_string().contains("token@"));
    }
    // The daemon's data directory is never shown, even from a session in the home folder.
    let data = sandbox.home().join(".local/share/switchboard");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("token"), "not yours").unwrap();
    let (status, home) = server.post("/api/sessions", json!({"cwd": sandbox.home()})).await;
    assert_eq!(status, 201, "{home}");
    let home_id = home["id"].as_str().unwrap();
    for path in [".local/share/switchboard/token", ".local/share/switchboard"] {
        let (status, refused) =
            server.get(&format!("/api/sessions/{home_id}/file?path={path}")).await;
        assert_eq!(status, 404, "{path}: {refused}");
        let (status, refused) =
            server.get(&format!("/api/sessions/{home_id}/files?path={path}")).await;
        assert!(status == 404 || status == 400, "{path}: {refused}");
    }
    let (status, around) =
        server.get(&format!("/api/sessions/{home_id}/files?path=.local/share")).await;
    assert_eq!(status, 200, "the folders around it are shown: {around}");
    assert!(!around.to_string().contains("switchboard"), "and it is not listed: {around}");
    // A hard link to its token, in a session's directory, is the same file.
    if std::fs::hard_link(data.join("token"), dir.join("hard-token")).is_ok() {
        let (status, refused) =
            server.get(&format!("/api/sessions/{id}/file?path=hard-token")).await;
        assert_eq!(status, 404, "{refused}");
    }
    // So is a hard link to the file the policy denies (Read(./.env)), under another name.
    std::fs::hard_link(dir.join(".env"), dir.join("innocent.txt")).unwrap();
    let (status, refused) = server.get(&format!("/api/sessions/{id}/file?path=innocent.txt")).await;
    assert_eq!(status, 404, "{refused}");
    assert!(!refused.to_string().contains("not-yours"), "{refused}");
    std::fs::remove_file(dir.join("innocent.txt")).unwrap();
    // A session whose directory is named through a link and with ./ in it: the policy's
    // Read(./.env) still holds, and .env is not even listed.
    let linked = sandbox.home().join("linked");
    std::os::unix::fs::symlink(&dir, &linked).unwrap();
    let body = json!({"cwd": format!("{}/./", linked.display()), "policy": policy});
    let (status, named) = server.post("/api/sessions", body).await;
    assert_eq!(status, 201, "{named}");
    let named_id = named["id"].as_str().unwrap();
    let (status, refused) = server.get(&format!("/api/sessions/{named_id}/file?path=.env")).await;
    assert_eq!(status, 404, "{refused}");
    let (_, top) = server.get(&format!("/api/sessions/{named_id}/files")).await;
    assert!(!top.to_string().contains(".env"), "{top}");
    assert!(top.to_string().contains("logo.png"), "{top}");

    // A watcher's token may not read the files.
    let (_, made) = server.post("/api/tokens", json!({"name": "watcher", "scope": "read"})).await;
    let watcher = made["token"].as_str().unwrap();
    let (status, _) = server
        .request_as(watcher, reqwest::Method::GET, &format!("/api/sessions/{id}/files"), None)
        .await;
    assert_eq!(status, 403);
    server.stop().await;
}

/// Reads the shell's output until it contains `wanted`; returns all of it.
async fn shell_output(ws: &mut crate::Ws, seen: &mut String, wanted: &str) {
    use futures::StreamExt as _;
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    while !seen.contains(wanted) {
        let frame = tokio::time::timeout(crate::WAIT, ws.socket.next())
            .await
            .unwrap_or_else(|_| panic!("no {wanted:?} in time; so far: {seen}"))
            .expect("open")
            .expect("a frame");
        match frame {
            WsMessage::Binary(bytes) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            WsMessage::Text(text) => seen.push_str(&text),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_in_the_session_s_directory_ends_with_the_session() {
    use futures::SinkExt as _;
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let (_, session) = server.post("/api/sessions", json!({"cwd": sandbox.workdir()})).await;
    let id = session["id"].as_str().unwrap().to_owned();
    let path = format!("/api/sessions/{id}/shell");

    // Only a token that may run anything: an operate token is refused before the upgrade.
    let (_, made) = server.post("/api/tokens", json!({"name": "op", "scope": "operate"})).await;
    let operate = made["token"].as_str().unwrap();
    let (status, refused) = server.request_as(operate, reqwest::Method::GET, &path, None).await;
    assert_eq!(status, 403, "{refused}");

    let mut ws = server.ws(&path).await;
    let mut seen = String::new();
    shell_output(&mut ws, &mut seen, "\"started\"").await;
    let started: Value = serde_json::from_str(seen.trim()).unwrap();
    let shell_pid = started["pid"].as_u64().unwrap() as i32;
    let resize = json!({"type": "resize", "cols": 120, "rows": 40}).to_string();
    ws.socket.send(WsMessage::Text(resize.into())).await.unwrap();
    let typed = "echo SB_$((6*7)) $(pwd) $(stty size); echo HOME''=$HOME; nohup sleep 300 >/dev/null 2>&1 & echo BG''=$! END''MARK\r";
    ws.socket.send(WsMessage::Binary(typed.as_bytes().to_vec().into())).await.unwrap();
    let mut seen = String::new();
    // The output, not the echo of what was typed (which has the quotes).
    shell_output(&mut ws, &mut seen, "ENDMARK").await;
    let workdir = sandbox.workdir().canonicalize().unwrap();
    // After bash's own escape sequences (bracketed paste off), the echo's output.
    let line = seen.split("SB_42").nth(1).and_then(|rest| rest.lines().next());
    let line = line.map(|rest| format!("SB_42{rest}")).unwrap_or_else(|| panic!("{seen}"));
    assert_eq!(
        line.trim_end(),
        format!("SB_42 {} 40 120", workdir.display()),
        "in the session's directory, at the page's size"
    );
    // The environment the session's CLI has (here, the sandbox's home), not the daemon's own.
    assert!(
        seen.contains(&format!("HOME={}", sandbox.home().display())),
        "the session's environment: {seen}"
    );
    let background: i32 = seen
        .split("BG=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("{seen}"));
    // Running: in /proc and not a zombie waiting for init to reap it.
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
            .unwrap_or(false)
    };
    assert!(alive(shell_pid) && alive(background));

    // The session stops: the shell ends, and what it left running with it.
    let (status, _) = server
        .request_as(crate::TOKEN, reqwest::Method::DELETE, &format!("/api/sessions/{id}"), None)
        .await;
    assert!(status < 300, "{status}");
    let mut seen = String::new();
    shell_output(&mut ws, &mut seen, "the session ended").await;
    assert!(seen.contains("\"exit\""), "{seen}");
    // Ended before the daemon said so.
    assert!(!alive(shell_pid), "the shell is gone");
    assert!(!alive(background), "its background job is gone");

    // A stopped session has no shell to open.
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let url = format!("{}{path}", server.base.replace("http://", "ws://"));
    let mut request = url.into_client_request().unwrap();
    let bearer = format!("Bearer {}", crate::TOKEN).parse().unwrap();
    request.headers_mut().insert("authorization", bearer);
    match tokio_tungstenite::connect_async(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 409, "not running")
        }
        other => panic!("opened a shell of a stopped session: {:?}", other.map(|_| ())),
    }
    server.stop().await;
}
