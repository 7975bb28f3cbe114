//! What the console tests read off a page.

/// The CSRF token the console's forms carry.
pub(crate) fn csrf(page: &str) -> String {
    let start = page.find("name=csrf value=").expect("a form") + "name=csrf value=".len();
    page[start..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect()
}
