// One context per HTTP stream or TCP connection: in flight from creation to deletion.
import { Root, countStreamDone } from "./root";

/** A stream or connection; counted at creation, uncounted exactly once. */
export class Stream {
  /** The plugin that created it. */
  root: Root;
  /** Whether it is part of the in-flight count: not if its +1 failed (host error), nor once uncounted. */
  counted: bool;

  constructor(root: Root) {
    this.root = root;
    this.counted = root.changeInflight(1);
  }

  /** Request headers (they may never come): an excluded path leaves the count now. */
  onRequestHeaders(): void {
    if (this.counted && this.root.isExcluded()) {
      this.counted = false;
      this.root.changeInflight(-1);
    }
  }

  /** The host destroyed the context: whatever ended it, it leaves the count. */
  onDelete(): void {
    if (!this.counted) return;
    this.counted = false;
    this.root.changeInflight(-1);
    countStreamDone();
  }
}
