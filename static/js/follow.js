/**
 * Keeps a scrolling element pinned to its newest content, until the reader scrolls up to read something
 * earlier; then new captions stop pulling the view away and a "jump to live" button appears instead.
 *
 * The view is unpinned only by an upward scroll that leaves the bottom. That rule needs no guess about who
 * scrolled: the page's own scrolling only ever moves down, and when content shrinks (a partial line turns
 * into a shorter locked sentence) the browser clamps the position while it is still at the bottom.
 */

// How close to the bottom still counts as "at the live edge", in CSS pixels.
const SLACK_PX = 48;

export class Follow {
  #scroller;
  #button;
  #pinned = true;
  #lastTop = 0;

  constructor(scroller, button) {
    this.#scroller = scroller;
    this.#button = button;
    scroller.addEventListener("scroll", () => this.#onScroll(), { passive: true });
    button.addEventListener("click", () => this.jump());
    // Rotating a phone or resizing the window changes the height without a scroll by the reader.
    new ResizeObserver(() => this.#pinned && this.#toBottom()).observe(scroller);
  }

  get pinned() {
    return this.#pinned;
  }

  /** Call after content changed: follows it when pinned, otherwise offers the jump button. */
  update() {
    if (this.#pinned) this.#toBottom();
    this.#sync();
  }

  /** Back to the live edge, and stay there. */
  jump() {
    this.#pinned = true;
    this.#sync();
    const smooth = !matchMedia("(prefers-reduced-motion: reduce)").matches;
    this.#scroller.scrollTo({ top: this.#scroller.scrollHeight, behavior: smooth ? "smooth" : "auto" });
  }

  #toBottom() {
    this.#scroller.scrollTop = this.#scroller.scrollHeight;
    this.#lastTop = this.#scroller.scrollTop;
  }

  #onScroll() {
    const s = this.#scroller;
    const top = s.scrollTop;
    if (s.scrollHeight - top - s.clientHeight <= SLACK_PX) this.#pinned = true;
    else if (top < this.#lastTop) this.#pinned = false;
    this.#lastTop = top;
    this.#sync();
  }

  #sync() {
    const s = this.#scroller;
    const overflowing = s.scrollHeight > s.clientHeight + SLACK_PX;
    this.#button.hidden = this.#pinned || !overflowing;
  }
}
