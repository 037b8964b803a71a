"""Stage 3, the target/draft pair a run uses: named profiles, the checks that refuse a bad pair before any engine
starts, the shipped tiny pair's training and its tokenizer."""
