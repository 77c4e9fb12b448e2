import javax.persistence.Column;
import javax.persistence.Entity;
import javax.persistence.GeneratedValue;
import javax.persistence.GenerationType;
import javax.persistence.Id;
import javax.persistence.Table;

/** The mapping (JPA 2.0 annotations, Hibernate 3.6): the database makes the id, Hibernate reads
 *  it back. IDENTITY is Hibernate's only strategy for "the INSERT makes the key"; with
 *  getGeneratedKeys (the default with pgjdbc) it reads the DEFAULT's value from RETURNING *.
 *  columnDefinition is what hbm2ddl would need, and it ignores it for an identity column. */
@Entity
@Table(name = "hb_photos")
public class HibernatePhoto {
    @Id
    @GeneratedValue(strategy = GenerationType.IDENTITY)
    @Column(name = "id", columnDefinition = "bigint default next_shard_id('hb_photos_id_seq', 6)")
    private Long id;

    @Column(name = "note", nullable = false)
    private String note;

    public HibernatePhoto() {}
    public HibernatePhoto(String note) { this.note = note; }
    public Long getId() { return id; }
    public String getNote() { return note; }
}
