//! The rest of a person's day with an agent, with the real CLI: an image pasted into a prompt
//! reaches the model as an image block; a bad one is refused before it reaches the CLI.

use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

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
