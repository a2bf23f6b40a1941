package lakehouse.fs;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's {@code file:} file system for {@code FileContext} ({@code
 * fs.AbstractFileSystem.file.impl}), as Hadoop's own {@code org.apache.hadoop.fs.local.LocalFs}
 * (checksummed, over a raw local file system), without a process per file.
 *
 * <p>Without Hadoop's native library, which pip's pyspark does not ship, the raw local file
 * system sets a new file's permissions by running {@code chmod}, and checks whether a path is a
 * symbolic link before each rename by running {@code readlink}. Spark's streaming checkpoints and
 * Delta's log write every commit through {@code FileContext}: of the 186 processes a fresh driver
 * started for a small run of the three layers, 146 were these. {@link Raw} does both with {@code
 * java.nio}; what it does not cover (a sticky bit, a path that is a symbolic link) goes to
 * Hadoop's own code as before.
 */
public final class LocalFs extends ChecksumFs {

  public LocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new RawFs(uri, conf));
  }

  /** The raw file system under the checksums, as Hadoop's {@code RawLocalFs} is. */
  static final class RawFs extends DelegateToFileSystem {
    RawFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new Raw(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1; // no port, as Hadoop's RawLocalFs says
    }
  }

  /** Hadoop's raw local file system, its two shell commands done in this process. */
  public static final class Raw extends RawLocalFileSystem {

    @Override
    public void setPermission(Path path, FsPermission permission) throws IOException {
      if (permission.getStickyBit()) {
        super.setPermission(path, permission);
        return;
      }
      // "rwxr-x---": the user's, the group's and the others' actions, as chmod takes them.
      Files.setPosixFilePermissions(
          pathToFile(path).toPath(), PosixFilePermissions.fromString(permission.toString()));
    }

    /**
     * A path that is not a symbolic link has the status of what it names (or does not exist);
     * Hadoop's own code answers for a link.
     */
    @Override
    public FileStatus getFileLinkStatus(Path path) throws IOException {
      if (Files.isSymbolicLink(pathToFile(path).toPath())) {
        return super.getFileLinkStatus(path);
      }
      return getFileStatus(path);
    }
  }
}
