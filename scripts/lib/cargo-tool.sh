# Sourced by the scripts that run a cargo tool: `cargo_tool NAME VERSION` installs the pinned
# tool from crates.io into a cache outside the repository the first time (a minute or a few of
# compiling), and sets `tool_bin` to its binary:
#
#   ${SWITCHBOARD_TOOL_CACHE:-$HOME/.cache/switchboard/tools}/NAME-VERSION/bin/NAME
cargo_tool() {
  local name="$1" version="$2"
  local cache="${SWITCHBOARD_TOOL_CACHE:-$HOME/.cache/switchboard/tools}"
  local root="$cache/$name-$version"
  tool_bin="$root/bin/$name"
  [ -x "$tool_bin" ] && return 0
  echo "${name}: installing $name $version into $root (once) ..." >&2
  # Installed into a fresh folder beside the final one, then swapped in: an interrupted
  # install leaves no half copy where the next run would take it for whole.
  mkdir -p "$cache"
  local tmp
  tmp="$(mktemp -d "$cache/.install-$name.XXXXXX")"
  if ! cargo install "$name" --version "=$version" --locked --root "$tmp" --quiet; then
    rm -rf "$tmp"
    echo "${name}: cargo could not install $name $version" >&2
    return 1
  fi
  rm -rf "$root"
  mv "$tmp" "$root"
}
