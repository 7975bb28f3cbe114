#![no_main]

libfuzzer_sys::fuzz_target!(
    |input: hooklatch_fuzz::VerifyInput| hooklatch_fuzz::verify_structured(input)
);
