// SPDX-License-Identifier: MIT
// The official OpenAI and Ollama client libraries against agentxpu serve, run by
// test-http-clients.py: node clients.mjs BASE_URL TOKEN MODEL SOCKET
// Prints one JSON object with what each client got; the test checks it.
import http from "node:http";
import net from "node:net";
import OpenAI from "openai";
import { Ollama } from "ollama";

const [base, token, model, socketPath] = process.argv.slice(2);
const out = {};

const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: token, maxRetries: 0 });
const chat = { model, max_tokens: 16, temperature: 0, messages: [{ role: "user", content: "Hello" }] };

const whole = await openai.chat.completions.create(chat);
out.openai_chat = { content: whole.choices[0].message.content, finish: whole.choices[0].finish_reason,
                    usage: whole.usage };

const stream = await openai.chat.completions.create({ ...chat, stream: true,
                                                      stream_options: { include_usage: true } });
let text = "", finish = null, usage = null;
for await (const chunk of stream) {
  if (chunk.choices.length) {
    text += chunk.choices[0].delta.content ?? "";
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  if (chunk.usage) usage = chunk.usage;
}
out.openai_chat_stream = { content: text, finish, usage };

const comp = await openai.completions.create({ model, prompt: "Once upon a time", max_tokens: 12, temperature: 0 });
out.openai_completion = comp.choices[0].text;
let ctext = "";
for await (const chunk of await openai.completions.create({ model, prompt: "Once upon a time", max_tokens: 12,
                                                            temperature: 0, stream: true }))
  ctext += chunk.choices[0].text;
out.openai_completion_stream = ctext;

out.openai_models = (await openai.models.list()).data.map((m) => m.id);
out.openai_retrieve = (await openai.models.retrieve(out.openai_models[0])).id;

async function apiError(p) {
  try {
    await p;
    return null;
  } catch (e) {
    return { name: e.constructor.name, status: e.status, code: e.code ?? null, message: e.message };
  }
}
out.openai_unknown_model = await apiError(openai.chat.completions.create({ ...chat, model: "gpt-4o" }));

// Structured output and tool calls.
const weather = { type: "object", properties: { city: { enum: ["Paris", "Oslo"] }, unit: { enum: ["C", "F"] } },
                  required: ["city", "unit"], additionalProperties: false };
const tools = [{ type: "function", function: { name: "get_weather", description: "The weather in a city",
                                               parameters: weather } }];
const ask = [{ role: "user", content: "What is the weather in Paris?" }];
const json = await openai.chat.completions.create({ ...chat, max_tokens: 64, messages: [{ role: "user", content: "hi" }],
                                                    response_format: { type: "json_object" } });
out.openai_json_object = json.choices[0].message.content;
const schema = await openai.chat.completions.create({ ...chat, max_tokens: 64, messages: ask,
  response_format: { type: "json_schema", json_schema: { name: "weather", strict: true, schema: weather } } });
out.openai_json_schema = schema.choices[0].message.content;
const called = await openai.chat.completions.create({ ...chat, max_tokens: 64, messages: ask, tools,
                                                      tool_choice: "required" });
out.openai_tool_call = { finish: called.choices[0].finish_reason, message: called.choices[0].message };
// streamed, gathered as the library's own helper gathers it
const runner = openai.beta.chat.completions.stream({ ...chat, max_tokens: 64, messages: ask, tools,
                                                     tool_choice: "required" });
const final = await runner.finalChatCompletion();
out.openai_tool_call_stream = { finish: final.choices[0].finish_reason, message: final.choices[0].message };
// The tool loop: the call goes back with the tool's result, and the model answers it.
const result = { role: "tool", tool_call_id: called.choices[0].message.tool_calls[0].id,
                 content: JSON.stringify({ temperature: 22, unit: "C" }) };
const answered = await openai.chat.completions.create({ ...chat, max_tokens: 8, messages: [...ask,
  called.choices[0].message, result], tools });
const answeredStream = await openai.beta.chat.completions.stream({ ...chat, max_tokens: 8, messages: [...ask,
  called.choices[0].message, result], tools }).finalChatCompletion();
out.openai_tool_loop = { first_prompt_tokens: called.usage.prompt_tokens, finish: answered.choices[0].finish_reason,
                         message: answered.choices[0].message, usage: answered.usage,
                         stream_finish: answeredStream.choices[0].finish_reason };

// Several choices (n): whole, and streamed, gathered by index as the library's helper does.
const several = { ...chat, max_tokens: 8, temperature: 1.0, seed: 5, n: 3 };
out.openai_choices = (await openai.chat.completions.create(several)).choices
  .map((c) => [c.index, c.message.content, c.finish_reason]);
out.openai_choices_stream = (await openai.beta.chat.completions.stream(several).finalChatCompletion()).choices
  .map((c) => [c.index, c.message.content, c.finish_reason]);

// Token probabilities: whole, and gathered from a stream by the library's helper.
const withLogprobs = { ...chat, max_tokens: 4, logprobs: true, top_logprobs: 2 };
out.openai_logprobs = (await openai.chat.completions.create(withLogprobs)).choices[0].logprobs.content;
out.openai_logprobs_stream = (await openai.beta.chat.completions.stream(withLogprobs).finalChatCompletion())
  .choices[0].logprobs.content;

// A conversation that comes back: its second turn continues the first's flow.
const turn1 = await openai.chat.completions.create({ ...chat, messages: ask });
const turn2 = await openai.chat.completions.create({ ...chat, messages: [...ask, turn1.choices[0].message,
                                                                        { role: "user", content: "And in Oslo?" }] });
out.openai_conversation = { first: turn1.usage, second: turn2.usage };
out.openai_bad_token = await apiError(new OpenAI({ baseURL: `${base}/v1`, apiKey: "wrong", maxRetries: 0 })
                                        .models.list());

// Embeddings: the library's default encoding (base64, which it decodes), and floats.
const texts = ["The cat sat on the mat.", "A dog ran in the park."];
const emb = await openai.embeddings.create({ model, input: texts });
out.openai_embeddings = { data: emb.data.map((d) => [d.index, d.embedding.length, d.embedding.slice(0, 4)]),
                          usage: emb.usage };
out.openai_embedding_float = (await openai.embeddings.create({ model, input: texts[0], encoding_format: "float" }))
  .data[0].embedding.slice(0, 4);

// The Unix socket, through an agent that connects there (no token: the socket is the user's).
class UnixAgent extends http.Agent {
  createConnection(options, callback) {
    return net.createConnection(socketPath, callback);
  }
}
const local = new OpenAI({ baseURL: "http://localhost/v1", apiKey: "unused", httpAgent: new UnixAgent(),
                           maxRetries: 0 });
out.openai_unix_socket = (await local.chat.completions.create(chat)).choices[0].message.content;

const ollama = new Ollama({ host: base, headers: { Authorization: `Bearer ${token}` } });
const options = { num_predict: 10, temperature: 0 };
const gen = await ollama.generate({ model, prompt: "Hello", options });
out.ollama_generate = { response: gen.response, done: gen.done, done_reason: gen.done_reason,
                        eval_count: gen.eval_count };
let gtext = "", gdone = null;
for await (const part of await ollama.generate({ model, prompt: "Hello", options, stream: true })) {
  gtext += part.response;
  if (part.done) gdone = part.done_reason;
}
out.ollama_generate_stream = { response: gtext, done_reason: gdone };
const messages = [{ role: "user", content: "Hello" }];
out.ollama_chat = (await ollama.chat({ model, messages, options })).message.content;
out.ollama_logprobs = (await ollama.chat({ model, messages, options: { num_predict: 4, temperature: 0 },
                                           logprobs: true, top_logprobs: 2 })).logprobs;
let chtext = "";
for await (const part of await ollama.chat({ model, messages, options, stream: true }))
  chtext += part.message.content;
out.ollama_chat_stream = chtext;
out.ollama_list = (await ollama.list()).models.map((m) => m.name);
out.ollama_ps = (await ollama.ps()).models.map((m) => m.name);
{
  const show = await ollama.show({ model });
  out.ollama_show = { family: show.details.family, capabilities: show.capabilities,
                      context: show.model_info["llama.context_length"] };
}
try {
  await ollama.generate({ model: "llama3", prompt: "Hello" });
  out.ollama_unknown_model = null;
} catch (e) {
  out.ollama_unknown_model = { name: e.name, status: e.status_code, message: e.error ?? e.message };
}
out.ollama_format_json = (await ollama.chat({ model, messages: [{ role: "user", content: "hi" }], format: "json",
                                              options: { num_predict: 64, temperature: 0 } })).message.content;
out.ollama_format_schema = (await ollama.generate({ model, prompt: "Weather?", format: weather,
                                                   options: { num_predict: 64, temperature: 0 } })).response;
const otools = await ollama.chat({ model, messages: ask, tools, options: { num_predict: 64, temperature: 0 } });
out.ollama_tools = otools.message;

out.ollama_embed = (await ollama.embed({ model, input: texts })).embeddings.map((e) => [e.length, e.slice(0, 4)]);
out.ollama_embeddings = (await ollama.embeddings({ model, prompt: texts[0] })).embedding.slice(0, 4);

console.log(JSON.stringify(out));
