// Search from the file system. A page opened as file://.../index.html may not start a Web Worker
// (the browser refuses a worker script from a file: URL), and material's search runs in one; its
// index is already read from search/search_index.js there (written by docs/hooks/file_site.py's
// on_post_build). This runs the worker's script in a hidden frame of the page instead, with the
// same messages both ways. Served over http(s), nothing changes: the real Worker is used.
(function () {
  if (location.protocol !== "file:") return;
  class FrameWorker extends EventTarget {
    constructor(url) {
      super();
      this.queue = [];
      const frame = document.createElement("iframe");
      frame.hidden = true;
      frame.setAttribute("aria-hidden", "true");
      (document.body || document.documentElement).appendChild(frame);
      const scope = frame.contentWindow;
      this.scope = scope;
      // The worker's postMessage(data): a "message" event on this object, as from a real worker.
      scope.postMessage = (data) => setTimeout(() => {
        const event = new MessageEvent("message", { data: data });
        this.dispatchEvent(event);
        if (typeof this.onmessage === "function") this.onmessage(event);
      });
      const script = scope.document.createElement("script");
      script.src = new URL(url, location.href).href;
      script.onload = () => { const queued = this.queue; this.queue = null; queued.forEach((d) => this.post(d)); };
      scope.document.head.appendChild(script);
    }
    post(data) {
      this.scope.dispatchEvent(new this.scope.MessageEvent("message", { data: data }));
    }
    postMessage(data) {
      if (this.queue) this.queue.push(data); else setTimeout(() => this.post(data));
    }
    terminate() {}
  }
  window.Worker = FrameWorker;
})();
