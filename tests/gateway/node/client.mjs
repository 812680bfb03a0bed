// Drives budgetmix gateway with the official openai npm client: argv[2] is the gateway URL.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: `${process.argv[2]}/v1`,
  apiKey: "sk-node",
  maxRetries: 0,
  defaultHeaders: { "x-budgetmix-conversation": "node-run" },
});
const messages = [{ role: "user", content: "hi from node" }];
const out = { whole: [], streamed: "" };
for (let i = 0; i < 2; i++) {
  const r = await client.chat.completions.create({ model: "m", messages });
  out.whole.push(r.choices[0].message.content);
}
const stream = await client.chat.completions.create({ model: "m", messages, stream: true });
for await (const chunk of stream) {
  out.streamed += chunk.choices[0]?.delta?.content ?? "";
}
console.log(JSON.stringify(out));
