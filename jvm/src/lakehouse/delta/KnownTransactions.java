package lakehouse.delta;

import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.util.HashMap;
import java.util.Map;
import org.apache.xbean.asm9.ClassReader;
import org.apache.xbean.asm9.ClassVisitor;
import org.apache.xbean.asm9.MethodVisitor;
import org.apache.xbean.asm9.Opcodes;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A Delta snapshot's streaming writers' transaction versions, taken from its version's checksum.
 *
 * <p>Every idempotent Delta write (the streaming sink, a write or a MERGE with a transaction id)
 * asks its snapshot for {@code transactions} before it commits, and Delta 4.4 answers from the
 * snapshot's whole reconstructed state: Spark jobs over the table's log, in the middle of the
 * write. The checksum Delta keeps beside each version ({@code <version>.crc}, computed
 * incrementally at every commit) lists the same {@code SetTransaction} actions. {@link #prime}
 * gives a snapshot that answer before anything asks, so an append needs no state at all.
 *
 * <p>{@code transactions} is a Scala lazy value of {@code Snapshot}: a field, and a bit of the
 * class's lazy-value bitmap that says it is set. The bit is read from the bytecode of the
 * accessor {@code transactions()}, not assumed, and both are set under the snapshot's monitor,
 * as Scala's own initialiser sets them. A snapshot or a Delta build that is not what this
 * expects is left to Delta.
 */
public final class KnownTransactions {

  static final String SNAPSHOT = "org.apache.spark.sql.delta.Snapshot";
  static final String LAZY_VALUE = "transactions";

  private static LazyValue lazyValue;
  private static boolean looked;

  private KnownTransactions() {}

  /**
   * Sets {@code snapshot.transactions} from the snapshot's checksum, when the checksum lists them
   * and nothing has asked for them yet; true if the snapshot now answers them without
   * reconstructing its state (set here or before).
   */
  public static boolean prime(Object snapshot) {
    try {
      return primed(snapshot);
    } catch (ReflectiveOperationException | ClassCastException e) {
      return false; // not the Delta this was written for: Delta answers as it always does
    }
  }

  private static boolean primed(Object snapshot) throws ReflectiveOperationException {
    if (!snapshot.getClass().getName().equals(SNAPSHOT)) {
      return false; // a subclass may answer in its own way
    }
    LazyValue value = lazyValue(snapshot.getClass());
    if (value == null) {
      return false;
    }
    Option<?> checksum = (Option<?>) call(snapshot, "checksumOpt");
    if (checksum.isEmpty()) {
      return false;
    }
    Option<?> listed = (Option<?>) call(checksum.get(), "setTransactions");
    if (listed.isEmpty()) {
      return false; // more writers than Delta lists in a checksum
    }
    if (((Option<?>) call(snapshot, "minSetTransactionRetentionTimestamp")).isDefined()) {
      return false; // the state leaves out expired transactions, the checksum need not
    }
    Map<String, Object> versions = new HashMap<>();
    for (Object txn : CollectionConverters.asJava((scala.collection.Iterable<?>) listed.get())) {
      versions.put((String) call(txn, "appId"), call(txn, "version"));
    }
    Object answer =
        scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(versions));
    synchronized (snapshot) {
      if (!value.isSet(snapshot)) {
        value.set(snapshot, answer);
      }
    }
    return true;
  }

  private static Object call(Object target, String method) throws ReflectiveOperationException {
    try {
      return target.getClass().getMethod(method).invoke(target);
    } catch (InvocationTargetException e) {
      if (e.getCause() instanceof RuntimeException cause) {
        throw cause;
      }
      throw e;
    }
  }

  private static synchronized LazyValue lazyValue(Class<?> snapshotClass) {
    if (!looked) {
      lazyValue = LazyValue.find(snapshotClass, LAZY_VALUE);
      looked = true;
    }
    return lazyValue;
  }

  /** A Scala 2.13 lazy value: its field, and its bit in the class's lazy-value bitmap. */
  static final class LazyValue {
    private final Field field;
    private final Field bitmap;
    private final long mask;

    private LazyValue(Field field, Field bitmap, long mask) {
      this.field = field;
      this.bitmap = bitmap;
      this.mask = mask;
    }

    boolean isSet(Object owner) throws IllegalAccessException {
      return (bits(owner) & mask) != 0;
    }

    void set(Object owner, Object value) throws IllegalAccessException {
      field.set(owner, value);
      if (bitmap.getType() == int.class) {
        bitmap.setInt(owner, (int) (bits(owner) | mask));
      } else {
        bitmap.setLong(owner, bits(owner) | mask);
      }
    }

    private long bits(Object owner) throws IllegalAccessException {
      return bitmap.getType() == int.class ? bitmap.getInt(owner) : bitmap.getLong(owner);
    }

    /**
     * The lazy value {@code name} of {@code owner}, as its accessor's bytecode tests it ({@code
     * (bitmap$N & MASK) == 0}, then {@code name$lzycompute()}), or null if the accessor is not
     * that or the field is not a Scala map.
     */
    static LazyValue find(Class<?> owner, String name) {
      String resource = owner.getName().replace('.', '/') + ".class";
      ClassLoader loader = owner.getClassLoader();
      try (InputStream in = loader == null ? null : loader.getResourceAsStream(resource)) {
        if (in == null) {
          return null;
        }
        Accessor accessor = new Accessor(name);
        new ClassReader(in).accept(accessor, ClassReader.SKIP_DEBUG | ClassReader.SKIP_FRAMES);
        if (accessor.bitmap == null || Long.bitCount(accessor.mask) != 1 || !accessor.computes) {
          return null;
        }
        Field field = owner.getDeclaredField(name);
        Field bitmap = owner.getDeclaredField(accessor.bitmap);
        boolean bitmapType = bitmap.getType() == int.class || bitmap.getType() == long.class;
        if (!bitmapType || !scala.collection.immutable.Map.class.equals(field.getType())) {
          return null;
        }
        field.setAccessible(true);
        bitmap.setAccessible(true);
        return new LazyValue(field, bitmap, accessor.mask);
      } catch (IOException | ReflectiveOperationException | RuntimeException e) {
        return null;
      }
    }
  }

  /** The bitmap field and the mask the accessor {@code name()} tests first. */
  static final class Accessor extends ClassVisitor {
    private final String name;
    String bitmap;
    long mask;
    boolean computes;

    Accessor(String name) {
      super(Opcodes.ASM9);
      this.name = name;
    }

    @Override
    public MethodVisitor visitMethod(
        int access, String method, String descriptor, String signature, String[] exceptions) {
      if (!method.equals(name) || !descriptor.startsWith("()")) {
        return null;
      }
      return new MethodVisitor(Opcodes.ASM9) {
        private boolean afterBitmap;

        @Override
        public void visitFieldInsn(int opcode, String owner, String field, String type) {
          afterBitmap = bitmap == null && opcode == Opcodes.GETFIELD && field.startsWith("bitmap$");
          if (afterBitmap) {
            bitmap = field;
          }
        }

        @Override
        public void visitLdcInsn(Object value) {
          if (afterBitmap && (value instanceof Integer || value instanceof Long)) {
            mask = ((Number) value).longValue();
          }
          afterBitmap = false;
        }

        @Override
        public void visitIntInsn(int opcode, int operand) {
          if (afterBitmap && (opcode == Opcodes.BIPUSH || opcode == Opcodes.SIPUSH)) {
            mask = operand;
          }
          afterBitmap = false;
        }

        @Override
        public void visitInsn(int opcode) {
          if (afterBitmap && opcode >= Opcodes.ICONST_1 && opcode <= Opcodes.ICONST_5) {
            mask = opcode - Opcodes.ICONST_0;
          }
          afterBitmap = false;
        }

        @Override
        public void visitMethodInsn(
            int opcode, String owner, String method, String type, boolean isInterface) {
          computes |= method.equals(name + "$lzycompute");
        }
      };
    }
  }
}
