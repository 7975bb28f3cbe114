//! `verify --request`: a raw HTTP/1.1 request, as captured, or a curl
//! command that sends one, split into the headers and the body a receiver
//! would have seen.

/// A captured request's headers (in order, names as written) and body.
pub(crate) type Captured = (Vec<(String, String)>, Vec<u8>);

/// The headers and the body of `raw`: a
/// request line (optional), header lines, a blank line, the body. Lines
/// may end in CRLF or LF. A `Content-Length` cuts the body there; a
/// chunked body is joined.
pub(crate) fn parse(raw: &[u8]) -> Result<Captured, String> {
    if let Some(command) = std::str::from_utf8(raw)
        .ok()
        .filter(|text| text.trim_start().starts_with("curl "))
    {
        return parse_curl(command);
    }
    // A capture may begin with an empty line (a paste, `nc`'s output).
    let start = raw
        .iter()
        .position(|byte| !matches!(byte, b'\r' | b'\n'))
        .unwrap_or(raw.len());
    let (head, rest) = split_head(&raw[start..]).ok_or(
        "no blank line after the headers: a request is its request line, its headers, an \
         empty line, then the body",
    )?;
    let head = std::str::from_utf8(head).map_err(|_| "the headers are not text")?;
    let mut lines = head
        .lines()
        .map(|line| line.strip_suffix('\r').unwrap_or(line));
    let mut headers = Vec::new();
    let mut first = true;
    for line in lines.by_ref() {
        if std::mem::take(&mut first) && is_request_line(line) {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            return Err(format!(
                "a header folded over two lines (`{line}`): join it to the line above"
            ));
        }
        let (name, value) = line
            .split_once(':')
            .filter(|(name, _)| !name.is_empty() && !name.contains(char::is_whitespace))
            .ok_or_else(|| format!("`{line}` is not a header (`name: value`)"))?;
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    let header = |wanted: &str| {
        headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
            .map(|(_, value)| value.as_str())
    };
    let chunked = header("transfer-encoding")
        .is_some_and(|value| value.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        join_chunks(rest)?
    } else if let Some(length) = header("content-length") {
        let length: usize = length
            .parse()
            .map_err(|_| format!("Content-Length `{length}` is not a number"))?;
        rest.get(..length)
            .ok_or(format!(
                "the body is {} bytes where Content-Length says {length}: the capture is cut short",
                rest.len()
            ))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok((headers, body))
}

/// The method and target a capture's request line names (`POST
/// /hooks?x=1 HTTP/1.1`), or a curl command's `-X` and URL (`POST` when it
/// sends data): what a message signature covers besides headers and body.
pub(crate) fn request_line(raw: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(raw).ok();
    if let Some(command) = text.filter(|text| text.trim_start().starts_with("curl ")) {
        return curl_line(command);
    }
    let start = raw.iter().position(|byte| !matches!(byte, b'\r' | b'\n'))?;
    let end = raw[start..]
        .iter()
        .position(|byte| *byte == b'\n')
        .map_or(raw.len(), |at| start + at);
    let line = std::str::from_utf8(&raw[start..end])
        .ok()?
        .trim_end_matches('\r');
    if !is_request_line(line) {
        return None;
    }
    let mut words = line.split(' ');
    Some((words.next()?.to_owned(), words.next()?.to_owned()))
}

/// A curl command's method and URL.
fn curl_line(command: &str) -> Option<(String, String)> {
    let words = shlex::split(command)?;
    let (mut method, mut url, mut sends_data) = (None, None, false);
    let mut words = words.into_iter().skip(1);
    while let Some(word) = words.next() {
        let (flag, inline) = split_flag(&word);
        let data = CURL_DATA.contains(&flag.as_str());
        // `-XPUT`: the method written against its flag.
        if let Some(attached) = flag.strip_prefix("-X").filter(|rest| !rest.is_empty()) {
            method = Some(attached.to_owned());
        } else if !flag.starts_with('-') {
            url.get_or_insert(word);
        } else if data
            || CURL_VALUED.contains(&flag.as_str())
            || matches!(flag.as_str(), "-H" | "--header")
        {
            let value = inline.or_else(|| words.next());
            sends_data |= data;
            match flag.as_str() {
                "-X" | "--request" => method = value,
                "--url" => url = value,
                _ => {}
            }
        }
    }
    let method = method.unwrap_or_else(|| if sends_data { "POST" } else { "GET" }.to_owned());
    Some((method, url?))
}

/// A curl word as its flag and, for `--flag=value`, the value written
/// with it.
fn split_flag(word: &str) -> (String, Option<String>) {
    match word.split_once('=') {
        Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value.to_owned())),
        _ => (word.to_owned(), None),
    }
}

/// curl's options that give the body.
const CURL_DATA: &[&str] = &[
    "-d",
    "--data",
    "--data-ascii",
    "--data-binary",
    "--data-raw",
    "--json",
];

/// The head and what follows the blank line that ends it (CRLF or LF).
fn split_head(raw: &[u8]) -> Option<(&[u8], &[u8])> {
    let crlf = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| (at, 4));
    let lf = raw.windows(2).position(|w| w == b"\n\n").map(|at| (at, 2));
    let (at, length) = match (crlf, lf) {
        (Some(crlf), Some(lf)) => std::cmp::min_by_key(crlf, lf, |(at, _)| *at),
        (one, other) => one.or(other)?,
    };
    Some((&raw[..at], &raw[at + length..]))
}

/// `POST /hooks HTTP/1.1`.
fn is_request_line(line: &str) -> bool {
    let words: Vec<&str> = line.split(' ').collect();
    words.len() == 3 && words[2].starts_with("HTTP/")
}

/// A chunked body's data, chunks joined; trailers after the last ignored.
fn join_chunks(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let end = rest
            .iter()
            .position(|byte| *byte == b'\n')
            .ok_or("a chunk's size line has no end")?;
        let line = std::str::from_utf8(&rest[..end]).map_err(|_| "a chunk size is not text")?;
        let size = line
            .trim_end_matches('\r')
            .split(';')
            .next()
            .unwrap_or("")
            .trim();
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| format!("`{size}` is not a chunk size in hex"))?;
        rest = &rest[end + 1..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = rest
            .get(..size)
            .ok_or("a chunk is cut short: the capture ends inside it")?;
        body.extend_from_slice(chunk);
        rest = &rest[size..];
        rest = rest
            .strip_prefix(b"\r\n")
            .or_else(|| rest.strip_prefix(b"\n"))
            .ok_or("a chunk does not end where its size says")?;
    }
}

/// curl's options that take a value and say nothing of the request's
/// headers or body (their values are skipped).
const CURL_VALUED: &[&str] = &[
    "-o",
    "--output",
    "-u",
    "--user",
    "-A",
    "--user-agent",
    "-e",
    "--referer",
    "-b",
    "--cookie",
    "-c",
    "--cookie-jar",
    "-m",
    "--max-time",
    "--connect-timeout",
    "-x",
    "--proxy",
    "--resolve",
    "--connect-to",
    "--cacert",
    "--cert",
    "--key",
    "-w",
    "--write-out",
    "--retry",
    "--retry-delay",
    "--retry-max-time",
    "-X",
    "--request",
    "--url",
    "-K",
    "--config",
    "--limit-rate",
    "--max-filesize",
    "--interface",
];

/// The headers (`-H`) and body (`-d`, `--data-raw`, `--data-binary`,
/// `--json`, `@file` read from this folder) of a curl command, split as a
/// POSIX shell splits it.
fn parse_curl(command: &str) -> Result<Captured, String> {
    let words = shlex::split(command)
        .ok_or("the curl command does not split as a shell would (a quote left open?)")?;
    let mut headers = Vec::new();
    let mut data: Vec<Vec<u8>> = Vec::new();
    let mut words = words.into_iter().skip(1);
    while let Some(word) = words.next() {
        let (flag, inline) = split_flag(&word);
        let mut value = || {
            inline
                .clone()
                .or_else(|| words.next())
                .ok_or_else(|| format!("curl's {flag} has no value"))
        };
        match flag.as_str() {
            "-H" | "--header" => {
                let line = value()?;
                let (name, text) = line
                    .split_once(':')
                    .filter(|(name, _)| !name.is_empty() && !name.contains(char::is_whitespace))
                    .ok_or_else(|| format!("`{line}` is not a header (`name: value`)"))?;
                headers.push((name.to_owned(), text.trim().to_owned()));
            }
            "-d" | "--data" | "--data-ascii" => {
                let value = value()?;
                let mut body = data_of(&value)?;
                // curl drops the line ends of a file given to these.
                if value.starts_with('@') {
                    body.retain(|byte| !matches!(byte, b'\r' | b'\n'));
                }
                data.push(body);
            }
            "--data-binary" | "--json" => data.push(data_of(&value()?)?),
            "--data-raw" => data.push(value()?.into_bytes()),
            "-F" | "--form" | "-T" | "--upload-file" | "--data-urlencode" => {
                return Err(format!(
                    "curl's {flag} builds a body this cannot rebuild exactly: capture the request \
                     itself (`nc -l 8080 > request.txt`, then point the sender there)"
                ));
            }
            flag if CURL_VALUED.contains(&flag) => {
                value()?;
            }
            _ => {}
        }
    }
    // Several data options are joined with `&`, as curl sends them.
    Ok((headers, data.join(&b'&')))
}

/// A data option's bytes: `@path` is that file's (`-` standard input is
/// not read here), else the text itself.
fn data_of(value: &str) -> Result<Vec<u8>, String> {
    match value.strip_prefix('@') {
        Some("-") => Err("the curl command reads its body from standard input: save it to a file and write @file".into()),
        Some(path) => std::fs::read(path).map_err(|error| format!("cannot read the body file {path}: {error}")),
        None => Ok(value.as_bytes().to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, request_line};

    #[test]
    fn the_request_line_comes_from_a_capture_or_a_curl_command() {
        let line = |raw: &str| request_line(raw.as_bytes());
        let owned = |method: &str, target: &str| Some((method.to_owned(), target.to_owned()));
        assert_eq!(
            line("\r\nPOST /in?x=1 HTTP/1.1\r\nHost: a.example\r\n\r\n{}"),
            owned("POST", "/in?x=1")
        );
        assert_eq!(line("Host: a.example\r\n\r\n{}"), None);
        assert_eq!(
            line("curl -H 'a: b' -d '{}' https://a.example/in"),
            owned("POST", "https://a.example/in")
        );
        assert_eq!(
            line("curl -XPUT --url https://a.example/in"),
            owned("PUT", "https://a.example/in")
        );
        assert_eq!(
            line("curl -X PATCH -o out.txt https://a.example/in"),
            owned("PATCH", "https://a.example/in")
        );
    }

    #[test]
    fn a_request_splits_into_its_headers_and_body() {
        let raw = b"POST /hooks HTTP/1.1\r\nHost: a\r\nwebhook-id: msg_1\r\nContent-Length: 2\r\n\r\n{}\n";
        let (headers, body) = parse(raw).unwrap();
        assert_eq!(headers[1], ("webhook-id".to_owned(), "msg_1".to_owned()));
        assert_eq!(body, b"{}", "cut at Content-Length");
        let (headers, body) = parse(b"\r\nwebhook-id: msg_1\n\n{}\n").unwrap();
        assert_eq!(headers.len(), 1);
        assert_eq!(body, b"{}\n", "no Content-Length: all of it");
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;x=y\r\n\":1}\r\n0\r\n\r\n";
        assert_eq!(parse(chunked).unwrap().1, b"{\"a\":1}");
    }

    #[test]
    fn a_broken_capture_is_said_as_such() {
        let error = |raw: &[u8]| parse(raw).unwrap_err();
        assert!(error(b"POST / HTTP/1.1\r\nHost: a\r\n").contains("no blank line"));
        assert!(error(b"Host a\n\n").contains("is not a header"));
        assert!(error(b"A: 1\n folded\n\n").contains("folded"));
        assert!(error(b"Content-Length: 9\n\n{}").contains("cut short"));
        assert!(error(b"Transfer-Encoding: chunked\n\nzz\n").contains("chunk size"));
        assert!(error(b"Transfer-Encoding: chunked\n\n9\n{}").contains("cut short"));
    }
}
