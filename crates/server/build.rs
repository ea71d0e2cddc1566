//! Compiles `proto/switchboard/v1/switchboard.proto` into the gRPC service and its messages, with
//! protox (a protobuf compiler in Rust: no system `protoc`), and keeps the encoded descriptor set
//! for server reflection.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    println!("cargo:rerun-if-changed={}", root.display());
    let descriptors = protox::compile(["switchboard/v1/switchboard.proto"], [&root])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("switchboard_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
