// A bounded load on 127.0.0.1: CONNECTIONS keep-alive clients, each sending
// its next request when the last is answered, for SECONDS. Prints requests/s.
//   node http_load.js PORT SECONDS CONNECTIONS
"use strict";
const http = require("http");

const [port, seconds, connections] = process.argv.slice(2).map(Number);
const agent = new http.Agent({ keepAlive: true, maxSockets: connections });
const end = Date.now() + seconds * 1000;
let answered = 0;

function next() {
  if (Date.now() >= end) return;
  http
    .get({ host: "127.0.0.1", port, path: "/item", agent }, (response) => {
      response.resume();
      response.on("end", () => {
        answered += 1;
        next();
      });
    })
    .on("error", (error) => {
      console.error(error.message);
      process.exit(1);
    });
}

const started = Date.now();
for (let client = 0; client < connections; client++) next();
process.on("exit", () => console.log((answered / ((Date.now() - started) / 1000)).toFixed(1)));
setTimeout(() => agent.destroy(), seconds * 1000 + 2000).unref();
