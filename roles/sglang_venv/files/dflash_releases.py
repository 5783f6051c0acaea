# What the host's releases were built from, read-only, standard library only, in one call
# (instead of a find and a read per release): the lock check needs every built release's lock,
# the change report the releases the instances run now, and the build whether this one is built.
# usage: python3 dflash_releases.py '<json request>'  -> prints one JSON object
# request: {"base_dir": str, "release_dir": str}
# answer:  {"built": [{"path": str, "text": str or null}],   every <base>/releases/<id>/.dflash-release/built.json
#                                                            that is a regular file, sorted; null: unreadable
#           "running": [str],                                what each <base>/instances/<name>/current points at
#           "running_built": [dict],                         those releases' built.json records (the readable,
#                                                            parsable ones)
#           "release_built": bool}                           release_dir's built.json exists (a link counts)
import json
import os
import stat
import sys

MARKER = os.path.join(".dflash-release", "built.json")


def read_text(path):
    """The file's text, or None when it cannot be read (an unreadable record counts as no record)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def built_records(base_dir):
    """Each release's built.json: regular files only, never followed through a link."""
    releases = os.path.join(base_dir, "releases")
    try:
        names = sorted(os.listdir(releases))
    except OSError:
        return []
    out = []
    for name in names:
        path = os.path.join(releases, name, MARKER)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
        except OSError:
            continue
        out.append({"path": path, "text": read_text(path)})
    return out


def running_releases(base_dir):
    """The targets of the instances' current links (a relative target is taken from the link's directory)."""
    instances = os.path.join(base_dir, "instances")
    try:
        names = sorted(os.listdir(instances))
    except OSError:
        return []
    out = []
    for name in names:
        link = os.path.join(instances, name, "current")
        try:
            target = os.readlink(link)
        except OSError:  # no link there, or not a link
            continue
        target = os.path.normpath(os.path.join(os.path.dirname(link), target))
        if target not in out:
            out.append(target)
    return out


def read_record(path):
    """A built.json as a dict, or None when it cannot be read or is not a JSON object."""
    text = read_text(path)
    try:
        record = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def answer(request):
    base_dir = request["base_dir"]
    running = running_releases(base_dir)
    records = [read_record(os.path.join(r, MARKER)) for r in running]
    return {
        "built": built_records(base_dir),
        "running": running,
        "running_built": [r for r in records if r is not None],
        "release_built": os.path.lexists(os.path.join(request["release_dir"], MARKER)),
    }


if __name__ == "__main__":
    json.dump(answer(json.loads(sys.argv[1])), sys.stdout)
    sys.stdout.write("\n")
