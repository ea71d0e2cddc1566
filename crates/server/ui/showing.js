// What the page shows: the open session's view, if any (set by the routes).

export const showing = { view: null };
