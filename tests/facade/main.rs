//! The way in for an application: the examples' outputs, the embedding walkthrough run
//! against a fake OpenAI-compatible endpoint on loopback (and checked against its
//! page), and a tool whose name is only known at run time.

mod embedding;
mod examples;
mod tool_name;
