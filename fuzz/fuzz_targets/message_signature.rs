#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hooklatch_fuzz::message_signature(data));
