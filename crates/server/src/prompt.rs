//! A prompt's content as a person or a program sends it (REST, gRPC, the web UI's paste and
//! drop): a string, or text and image blocks. Everything is checked here, before the prompt
//! reaches the CLI, so a bad image is refused at once with its reason instead of failing the
//! turn at the Messages API later. Only text and image blocks are taken; an image's type is
//! read from its bytes, and its size and the count of images are bounded.

use base64::Engine as _;
use serde_json::Value;
use switchboard_protocol::content::{ContentBlock, ImageSource};
use switchboard_protocol::{MessagePriority, UserMessage};

/// The image types the Messages API takes.
pub(crate) const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The largest image, decoded (the Messages API's own limit per image).
pub(crate) const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// The most images in one prompt.
pub(crate) const MAX_IMAGES: usize = 20;

/// The longest image URL.
const MAX_URL_CHARS: usize = 2048;

/// A prompt's content (a string, or content blocks) as a user message, or why not.
pub(crate) fn user_message(content: Value) -> Result<UserMessage, String> {
    match content {
        Value::String(text) if !text.is_empty() => Ok(UserMessage::prompt(text)),
        Value::String(_) => Err("content is empty".to_owned()),
        Value::Array(items) => {
            let mut blocks = Vec::with_capacity(items.len());
            for (index, item) in items.into_iter().enumerate() {
                let block: ContentBlock = serde_json::from_value(item)
                    .map_err(|error| format!("content[{index}] is not a content block: {error}"))?;
                blocks.push(block);
            }
            message_of(blocks)
        }
        _ => Err("content must be a string or an array of content blocks".to_owned()),
    }
}

/// A prompt of text and images already made into blocks (gRPC's images arrive as bytes).
pub(crate) fn message_of(blocks: Vec<ContentBlock>) -> Result<UserMessage, String> {
    let mut images = 0;
    for (index, block) in blocks.iter().enumerate() {
        match block {
            ContentBlock::Text(_) => {}
            ContentBlock::Image(image) => {
                images += 1;
                if images > MAX_IMAGES {
                    return Err(format!("a prompt may carry at most {MAX_IMAGES} images"));
                }
                check_image(&image.source).map_err(|why| format!("content[{index}]: {why}"))?;
            }
            other => {
                return Err(format!(
                    "content[{index}]: a prompt's blocks are text or image, not {}",
                    other.tag().unwrap_or("a block of no type")
                ))
            }
        }
    }
    let has_text = blocks
        .iter()
        .any(|block| matches!(block, ContentBlock::Text(text) if !text.text.trim().is_empty()));
    if images == 0 && !has_text {
        return Err("content is empty".to_owned());
    }
    Ok(UserMessage::blocks(blocks))
}

/// `message` to run with `priority` (`now`, `next`, `later`), or why not (an unknown one).
/// Whether the session's CLI does what it asks is the daemon's to say, where the session runs.
pub(crate) fn with_priority(
    mut message: UserMessage,
    priority: Option<MessagePriority>,
) -> Result<UserMessage, String> {
    if let Some(priority) = &priority {
        switchboard_session::priority_supported_by(priority, None)?;
    }
    message.priority = priority;
    Ok(message)
}

/// An image block from its bytes: its type read from the bytes themselves.
pub(crate) fn image_block(bytes: &[u8], media_type: &str) -> ContentBlock {
    ContentBlock::image_base64(media_type, base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Whether an image source is one the Messages API takes: base64 of a PNG, JPEG, GIF or WebP
/// of at most [`MAX_IMAGE_BYTES`] whose bytes are what its type says, or an `https` URL.
fn check_image(source: &ImageSource) -> Result<(), String> {
    match source.kind.as_str() {
        "base64" => {
            let media_type = source.media_type.as_deref().unwrap_or_default();
            if !IMAGE_TYPES.contains(&media_type) {
                return Err(format!(
                    "an image's media_type is one of {}, not {:?}",
                    IMAGE_TYPES.join(", "),
                    media_type
                ));
            }
            let data = source.data.as_deref().unwrap_or_default();
            // Base64 is 4 characters for 3 bytes: checked before decoding a byte.
            if data.len() / 4 * 3 > MAX_IMAGE_BYTES + 3 {
                return Err(too_large(data.len() / 4 * 3));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data)
                .map_err(|error| format!("an image's data is not base64: {error}"))?;
            if bytes.is_empty() {
                return Err("an image's data is empty".to_owned());
            }
            if bytes.len() > MAX_IMAGE_BYTES {
                return Err(too_large(bytes.len()));
            }
            match sniff(&bytes) {
                Some(found) if found == media_type => Ok(()),
                Some(found) => Err(format!("an image says it is {media_type} but is {found}")),
                None => Err(format!("an image's data is not a {media_type} image")),
            }
        }
        "url" => {
            let url = source.url.as_deref().unwrap_or_default();
            if url.len() > MAX_URL_CHARS {
                return Err(format!("an image's url is longer than {MAX_URL_CHARS} characters"));
            }
            match url.parse::<axum::http::Uri>() {
                Ok(parsed)
                    if parsed.scheme_str() == Some("https")
                        && parsed.host().is_some_and(|host| !host.is_empty()) =>
                {
                    Ok(())
                }
                _ => Err("an image's url must be an https:// address".to_owned()),
            }
        }
        other => Err(format!("an image's source type is base64 or url, not {other:?}")),
    }
}

fn too_large(bytes: usize) -> String {
    format!(
        "an image may be at most {} MiB, this one is {:.1} MiB",
        MAX_IMAGE_BYTES / (1024 * 1024),
        bytes as f64 / (1024.0 * 1024.0)
    )
}

/// The image type an image's first bytes show.
pub(crate) fn sniff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn image(media_type: &str, data: &str) -> Value {
        json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
    }

    #[test]
    fn text_and_images_pass() {
        let message =
            user_message(json!([{"type": "text", "text": "look"}, image("image/png", &b64(PNG))]));
        assert!(message.is_ok(), "{message:?}");
        assert!(user_message(json!([image("image/png", &b64(PNG))])).is_ok());
        assert!(user_message(json!("hello")).is_ok());
        let url = json!([{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]);
        assert!(user_message(url).is_ok());
    }

    #[test]
    fn bad_images_are_refused_with_their_reason() {
        let cases = [
            (json!([image("image/bmp", &b64(PNG))]), "media_type is one of"),
            (json!([image("image/png", "!!!")]), "not base64"),
            (json!([image("image/png", "")]), "empty"),
            (json!([image("image/jpeg", &b64(PNG))]), "says it is image/jpeg but is image/png"),
            (json!([image("image/png", &b64(b"<svg onload=alert(1)>"))]), "not a image/png image"),
            (
                json!([image("image/png", &b64(&vec![0u8; MAX_IMAGE_BYTES + 1]))]),
                "at most 5 MiB, this one is",
            ),
            (
                json!([{"type": "image", "source": {"type": "url", "url": "http://10.0.0.1/a.png"}}]),
                "https://",
            ),
            (
                json!([{"type": "image", "source": {"type": "file", "file_id": "x"}}]),
                "base64 or url",
            ),
            (
                json!([{"type": "tool_result", "tool_use_id": "t", "content": "x"}]),
                "content[0]: a prompt's blocks are text or image, not tool_result",
            ),
            (json!([{"type": "text", "text": "  "}]), "content is empty"),
            (json!([]), "content is empty"),
            (json!([{"type": "image"}]), "content[0] is not a content block"),
            (json!(7), "a string or an array"),
        ];
        for (content, expected) in cases {
            let error = user_message(content.clone()).expect_err(&content.to_string());
            assert!(error.contains(expected), "{content}: {error}");
        }
        let many: Vec<Value> = (0..=MAX_IMAGES).map(|_| image("image/png", &b64(PNG))).collect();
        assert!(user_message(Value::Array(many)).unwrap_err().contains("at most 20 images"));
    }

    #[test]
    fn the_type_is_read_from_the_bytes() {
        assert_eq!(sniff(PNG), Some("image/png"));
        assert_eq!(sniff(b"\xff\xd8\xff\xe0"), Some("image/jpeg"));
        assert_eq!(sniff(b"GIF89a..."), Some("image/gif"));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff(b"RIFF\0\0\0\0WAVE"), None);
        assert_eq!(sniff(b""), None);
        let block = image_block(PNG, "image/png");
        assert!(message_of(vec![block]).is_ok());
    }
}
