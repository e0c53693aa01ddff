// Hash routes (#/users/ann/sessions/s1): the server serves one page; the path after # is
// the view.
export interface Route {
  path: string[];
  query: URLSearchParams;
}

export function currentRoute(): Route {
  const raw = location.hash.replace(/^#/, "") || "/users";
  const [path, query = ""] = raw.split("?");
  return {
    path: path.split("/").filter(Boolean).map(decodeURIComponent),
    query: new URLSearchParams(query),
  };
}

export function href(path: string): string {
  return `#${path}`;
}

export function go(path: string): void {
  location.hash = path;
}
