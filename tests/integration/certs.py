"""Test certificates made with the openssl command at test time: a CA, leaves for given
names, an expired leaf, a key that matches none of them, and client certificates from the
CA and from a CA nobody trusts."""
import os
import subprocess

from harness import temp_dir


def _run(*argv):
    subprocess.run(["openssl", *argv], check=True, capture_output=True, timeout=60)


class Certs:
    def __init__(self):
        self.dir = temp_dir("sgcerts-")
        self.ca = self._ca("ca", "stealgate test CA")
        self.other_ca = self._ca("other-ca", "untrusted CA")

    def path(self, name):
        return os.path.join(self.dir, name)

    def _key(self, name):
        _run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", self.path(name + ".key"))
        return self.path(name + ".key")

    def _ca(self, name, cn):
        key = self._key(name)
        _run("req", "-x509", "-new", "-key", key, "-out", self.path(name + ".pem"), "-days", "30", "-subj", f"/CN={cn}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        return self.path(name + ".pem")

    def leaf(self, name, cn, sans=(), days=30, ca="ca", client=False):
        """A certificate for `cn` (subjectAltName DNS/IP entries `sans`) signed by `ca`;
        days < 0 makes one that has already expired. Returns (cert, key) paths."""
        key = self._key(name)
        csr = self.path(name + ".csr")
        _run("req", "-new", "-key", key, "-out", csr, "-subj", f"/CN={cn}")
        ext = self.path(name + ".ext")
        with open(ext, "w") as f:
            if sans:
                f.write("subjectAltName=" + ",".join(s if ":" in s else "DNS:" + s for s in sans) + "\n")
            f.write("extendedKeyUsage=" + ("clientAuth" if client else "serverAuth") + "\n")
        _run("x509", "-req", "-in", csr, "-CA", self.path(ca + ".pem"), "-CAkey", self.path(ca + ".key"),
             "-CAcreateserial", "-out", self.path(name + ".pem"), "-days", str(days), "-extfile", ext)
        return self.path(name + ".pem"), key

    def stray_key(self):
        return self._key("stray")


_SHARED = None


def shared():
    """One set per test process: a CA and a leaf for test.local and 127.0.0.1."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Certs()
        _SHARED.server = _SHARED.leaf("server", "test.local", ["test.local", "IP:127.0.0.1"])
    return _SHARED
