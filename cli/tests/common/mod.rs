//! What the CLI's test files share: running the `hooklatch` binary as a
//! user would.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

/// Runs `hooklatch` with `args`, `stdin` on its standard input; its whole
/// output. A usage error exits before reading its input: the closed pipe
/// is no failure.
pub(crate) fn hooklatch(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().unwrap()
}
