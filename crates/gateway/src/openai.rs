//! The OpenAI-compatible proxy (`knox gateway openai`).
