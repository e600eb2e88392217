// Reads a server-sent event stream (text/event-stream), as pagoda serve and the OpenAI API send
// streamed completions. Shared by tools/bench_serve.mjs and tests/server.

// Yields the data of each event, in order: its `data:` lines joined with "\n". Comments and the
// other fields (event, id, retry) are dropped, and so is an event the stream ends in the middle of.
// Lines end in "\n" or "\r\n"; a bare "\r", which no HTTP server here sends, is not a line end.
// chunks: an async iterable of byte chunks, such as a fetch Response body.
export async function* sse_data(chunks) {
  const decoder = new TextDecoder();
  let buffer = "";
  let data = [];
  for await (const chunk of chunks) {
    buffer += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end).replace(/\r$/, "");
      buffer = buffer.slice(end + 1);
      if (line === "") {
        if (data.length > 0) yield data.join("\n");
        data = [];
      } else if (line.startsWith("data:")) {
        data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
      }
    }
  }
}
