// A small HTTP server for the off-CPU cost benchmark: each request does some
// JSON work on the event loop (about 40 µs), so the server, not its client,
// is what limits the requests per second. Prints its port.
"use strict";
const http = require("http");

function page(path) {
  const items = [];
  for (let index = 0; index < 150; index++) items.push({ id: index, name: `item ${index}`, path, price: index * 1.5 });
  return JSON.stringify({ path, items });
}

const server = http.createServer((request, response) => {
  const body = page(request.url);
  response.writeHead(200, { "content-type": "application/json" });
  response.end(body);
});
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
