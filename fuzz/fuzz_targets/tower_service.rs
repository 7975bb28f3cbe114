#![no_main]

libfuzzer_sys::fuzz_target!(
    |input: hooklatch_fuzz::RequestInput| hooklatch_fuzz::tower_service(input)
);
