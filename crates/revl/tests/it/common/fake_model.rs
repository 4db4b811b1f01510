//! A scripted model on loopback for driving the real coding agents offline (docs/agents.md,
//! "How it is tested"): a fake of the Anthropic Messages API (Claude Code) and of the OpenAI
//! Responses API (Codex), both streaming SSE. The script says what the model answers at
//! each of its turns (a tool call or a final text), counted over the whole conversation the
//! agent sends back; every request body is kept, so a test reads what the agent sent (the
//! tool results: output, exit status).

use serde_json::{json, Value};
use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// What the model says at one of its turns.
#[derive(Debug, Clone)]
pub enum Say {
    /// A tool call: the tool's name and input (for Codex, `exec_command` takes `{"cmd"}` and
    /// `apply_patch` a patch text as `{"patch"}`).
    Call(&'static str, Value),
    /// A final answer: the agent's turn ends.
    Text(&'static str),
}

/// The vendor API a fake speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Anthropic,
    OpenAi,
}

pub struct FakeModel {
    pub url: String,
    pub requests: Arc<Mutex<Vec<Value>>>,
}

impl FakeModel {
    /// What Claude Code needs to talk to this fake and nothing else (docs/agents.md).
    pub fn claude_env(&self, c: &mut std::process::Command) {
        c.env("ANTHROPIC_BASE_URL", &self.url)
            .env("ANTHROPIC_API_KEY", "dummy")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_MAX_RETRIES", "0");
    }

    /// A Codex `config.toml` in `dir` pointing at this fake (with `FAKE_KEY` set in the
    /// environment), and nothing that waits for the network.
    pub fn codex_config(&self, dir: &std::path::Path) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            dir.join("config.toml"),
            format!(
                "model = \"gpt-5.5\"\nmodel_provider = \"fake\"\napproval_policy = \"never\"\ncheck_for_update_on_startup = false\n[model_providers.fake]\nname = \"fake\"\nbase_url = \"{}/v1\"\nwire_api = \"responses\"\nenv_key = \"FAKE_KEY\"\n[analytics]\nenabled = false\n[features]\nplugins = false\n",
                self.url
            ),
        )
        .unwrap();
    }

    /// Serve `script` on 127.0.0.1 (a free port) until the process ends.
    pub fn start(api: Api, script: Vec<Say>) -> FakeModel {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let requests: Arc<Mutex<Vec<Value>>> = Arc::default();
        let (r2, script) = (requests.clone(), Arc::new(script));
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let (r3, s2) = (r2.clone(), script.clone());
                std::thread::spawn(move || serve(c, api, &s2, &r3));
            }
        });
        FakeModel { url, requests }
    }

    /// The tool results the agent sent back, in order: (tool-use id, text, is_error).
    pub fn results(&self) -> Vec<(String, String, bool)> {
        let reqs = self.requests.lock().unwrap();
        let Some(last) = reqs
            .iter()
            .rev()
            .find(|r| r.get("messages").is_some() || r.get("input").is_some())
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for m in last["messages"].as_array().into_iter().flatten() {
            for c in m["content"].as_array().into_iter().flatten() {
                if c["type"] == "tool_result" {
                    let text = match &c["content"] {
                        Value::String(s) => s.clone(),
                        Value::Array(a) => a.iter().filter_map(|x| x["text"].as_str()).collect(),
                        _ => String::new(),
                    };
                    out.push((
                        c["tool_use_id"].as_str().unwrap_or("").to_string(),
                        text,
                        c["is_error"].as_bool().unwrap_or(false),
                    ));
                }
            }
        }
        for i in last["input"].as_array().into_iter().flatten() {
            if matches!(
                i["type"].as_str(),
                Some("function_call_output" | "custom_tool_call_output")
            ) {
                out.push((
                    i["call_id"].as_str().unwrap_or("").to_string(),
                    i["output"].as_str().unwrap_or("").to_string(),
                    false,
                ));
            }
        }
        out
    }
}

/// How many answers the model gave so far in the conversation this request carries.
fn answered(api: Api, body: &Value) -> usize {
    match api {
        // Count assistant messages, not positions (a request may hold a mid-conversation
        // system entry).
        Api::Anthropic => body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count()),
        Api::OpenAi => body["input"].as_array().map_or(0, |m| {
            m.iter()
                .filter(|i| {
                    matches!(
                        i["type"].as_str(),
                        Some("function_call" | "custom_tool_call")
                    ) || (i["type"] == "message" && i["role"] == "assistant")
                })
                .count()
        }),
    }
}

fn serve(c: TcpStream, api: Api, script: &[Say], requests: &Mutex<Vec<Value>>) {
    let mut w = c.try_clone().unwrap();
    let mut r = BufReader::new(c);
    while let Some(revl::sink::Request {
        method, path, body, ..
    }) = revl::sink::read_request(&mut r)
    {
        let (ctype, out) = if method != "POST" {
            (
                "application/json",
                json!({"models": [], "data": []}).to_string(),
            )
        } else if path.contains("count_tokens") {
            ("application/json", json!({"input_tokens": 10}).to_string())
        } else {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let k = answered(api, &v);
            requests.lock().unwrap().push(v);
            let say = script.get(k).cloned().unwrap_or(Say::Text("done"));
            ("text/event-stream", sse(api, k, &say))
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\n\r\n",
            out.len()
        );
        if w.write_all(head.as_bytes())
            .and_then(|()| w.write_all(out.as_bytes()))
            .is_err()
        {
            return;
        }
    }
}

fn sse(api: Api, k: usize, say: &Say) -> String {
    let mut out = String::new();
    let mut ev = |name: &str, data: Value| {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    match api {
        Api::Anthropic => {
            ev(
                "message_start",
                json!({"type": "message_start", "message": {"id": format!("msg_{k}"), "type": "message", "role": "assistant", "model": "claude-fake", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1}}}),
            );
            let stop = match say {
                Say::Call(name, input) => {
                    ev(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": format!("toolu_{k}"), "name": name, "input": {}}}),
                    );
                    ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
                    );
                    "tool_use"
                }
                Say::Text(t) => {
                    ev(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                    );
                    ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}),
                    );
                    "end_turn"
                }
            };
            ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            );
            ev(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 1}}),
            );
            ev("message_stop", json!({"type": "message_stop"}));
        }
        Api::OpenAi => {
            ev(
                "response.created",
                json!({"type": "response.created", "response": {"id": format!("resp_{k}")}}),
            );
            let item = match say {
                Say::Call("apply_patch", input) => {
                    json!({"type": "custom_tool_call", "name": "apply_patch", "input": input["patch"], "call_id": format!("call_{k}"), "id": format!("ct_{k}")})
                }
                Say::Call(name, input) => {
                    json!({"type": "function_call", "name": name, "arguments": input.to_string(), "call_id": format!("call_{k}"), "id": format!("fc_{k}")})
                }
                Say::Text(t) => {
                    json!({"type": "message", "role": "assistant", "id": format!("m_{k}"), "content": [{"type": "output_text", "text": t}]})
                }
            };
            ev(
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
            );
            ev(
                "response.output_item.done",
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            );
            ev(
                "response.completed",
                json!({"type": "response.completed", "response": {"id": format!("resp_{k}"), "usage": {"input_tokens": 1, "input_tokens_details": null, "output_tokens": 1, "output_tokens_details": null, "total_tokens": 2}}}),
            );
        }
    }
    out
}
